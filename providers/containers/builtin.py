"""The built-in containers provider: `builtin` in the group `stack.providers.containers`.

It keeps containers' records in the `containers` store and runs each container as a sandbox of the
stack's `sandboxes` provider (required); with a `files` provider, a container can start with copies
of files uploaded there (`file_ids`). A sweep expires the containers idle past their expiry.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator

from contract.spec import Api, ProviderContext, ProviderSpec
from providers.containers.config import BuiltinContainersConfig
from providers.containers.provider import BuiltinContainers
from providers.containers.store import ContainerStore
from runtime.storage import every

__all__ = ["BUILTIN", "BuiltinContainers", "BuiltinContainersConfig"]

log = logging.getLogger("stack")


@contextlib.asynccontextmanager
async def create(context: ProviderContext[BuiltinContainersConfig]) -> AsyncIterator[BuiltinContainers]:
    store = ContainerStore(context.databases("containers"))
    await store.create_tables()
    provider = BuiltinContainers(store, context.deps[Api.sandboxes], context.deps.get(Api.files), context.config)
    await provider.reconcile()
    await provider.sweep()
    sweeper = every(context.config.sweep_s, provider.sweep, "the sweep of expired containers")
    try:
        yield provider
    finally:
        sweeper.cancel()


BUILTIN = ProviderSpec(
    api=Api.containers,
    name="builtin",
    config_model=BuiltinContainersConfig,
    factory=create,
    requires=(Api.sandboxes,),
    optional=(Api.files,),
    description="Containers (OpenAI's /v1/containers) as sandboxes of the stack's sandboxes provider, their records in the `containers` store",
)
