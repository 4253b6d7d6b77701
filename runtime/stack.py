"""Start a resolved plan: providers entered in dependency order, left in reverse."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from builder.resolve import PlannedProvider, StackPlan
from contract.spec import Api, ProviderContext
from runtime.apis import SURFACES
from runtime.apis.surface import ApiContext
from runtime.transports.clients import http_client_factory, http_transport_factory
from runtime.storage import Storage
from runtime.http.loopback import AppLoopback

__all__ = ["ProviderStartError", "RunningProvider", "Stack", "open_stack"]

log = logging.getLogger("stack")


class ProviderStartError(Exception):
    """A provider's start-up hook failed; the providers started before it were shut down."""


@dataclass(frozen=True)
class RunningProvider:
    planned: PlannedProvider
    impl: Any


@dataclass(frozen=True)
class Stack:
    """A started stack: what the app's routes and the library client work with."""

    plan: StackPlan
    impls: Mapping[Api, Any]
    """The implementation of each API: its provider, or the router over its providers."""
    providers: tuple[RunningProvider, ...]
    storage: Storage
    closing: list[Callable[[], Awaitable[None]]] = field(default_factory=list)
    """Closed with the stack, first of all and last added first: what the app made over it (the quota counter)."""
    loopback: AppLoopback = field(default_factory=AppLoopback)
    """The providers' way to the stack's own routes (`ProviderContext.loopback`); the app attaches itself to it."""


@asynccontextmanager
async def open_stack(plan: StackPlan) -> AsyncIterator[Stack]:
    """Start every provider of `plan`; on exit (or a failed start) shut down what started."""
    plan.state_dir.mkdir(parents=True, exist_ok=True)
    async with AsyncExitStack() as exits:
        storage = Storage(plan.config.storage, plan.state_dir / "stack.db")
        exits.push_async_callback(storage.close)
        impls: dict[Api, Any] = {}
        running: list[RunningProvider] = []
        loopback = AppLoopback()
        for api in plan.apis:
            group: dict[str, Any] = {}
            for planned in plan.providers_of(api):
                impl = await _start(exits, planned, impls, storage, plan, loopback)
                group[planned.provider_id] = impl
                running.append(RunningProvider(planned, impl))
            impls[api] = await _combine(exits, api, group, storage, plan)
        _log_providers(plan)
        stack = Stack(plan=plan, impls=impls, providers=tuple(running), storage=storage, loopback=loopback)
        exits.push_async_callback(_close_all, stack.closing)  # pushed last: run first
        yield stack


async def _close_all(closing: list[Callable[[], Awaitable[None]]]) -> None:
    for close in reversed(closing):
        try:
            await close()
        except Exception:  # the providers still close
            log.exception("closing %r failed", close)


async def _start(exits: AsyncExitStack, planned: PlannedProvider, impls: Mapping[Api, Any], storage: Storage, plan: StackPlan,
                 loopback: AppLoopback) -> Any:
    wanted = (*planned.spec.requires, *planned.spec.optional)
    context: ProviderContext[Any] = ProviderContext(
        api=planned.api,
        provider_id=planned.provider_id,
        config=planned.config,
        deps={api: impls[api] for api in wanted if api in impls},
        state_dir=plan.state_dir,
        databases=storage.database,
        http_client=http_client_factory(plan.recording_mode_for(planned.provider_id), plan.recordings_dir),
        http_transport=http_transport_factory(plan.recording_mode_for(planned.provider_id), plan.recordings_dir),
        loopback=loopback,
    )
    try:
        impl = await exits.enter_async_context(planned.spec.factory(context))
    except Exception as error:
        raise ProviderStartError(
            f"{planned.path}: provider {planned.provider_id!r} ({planned.spec.name}) failed to start: "
            f"{type(error).__name__}: {error}"
        ) from error
    _check_protocol(planned, impl)
    return impl


def _check_protocol(planned: PlannedProvider, impl: Any) -> None:
    surface = SURFACES.get(planned.api)
    if surface is None or surface.protocol is None or isinstance(impl, surface.protocol):
        return
    missing = sorted(name for name in vars(surface.protocol) if not name.startswith("_") and not hasattr(impl, name))
    raise ProviderStartError(
        f"{planned.path}: provider {planned.provider_id!r} ({planned.spec.name}) does not implement the "
        f"{planned.api.value} API: {type(impl).__name__} lacks {', '.join(missing) or 'required methods'}"
    )


async def _combine(exits: AsyncExitStack, api: Api, group: dict[str, Any], storage: Storage, plan: StackPlan) -> Any:
    surface = SURFACES.get(api)
    if surface is None or surface.combine is None:
        # The resolver allows several providers only for APIs whose surface combines them.
        [impl] = group.values()
        return impl
    try:
        return await exits.enter_async_context(surface.combine(ApiContext(plan, group, storage.database)))
    except ValueError as error:  # the providers do not fit together (two serve one tool type)
        raise ProviderStartError(f"providers.{api.value}: {error}") from error


def _log_providers(plan: StackPlan) -> None:
    for provider in plan.providers:
        log.info("active provider: %s %s (%s)", provider.api.value, provider.provider_id, provider.spec.name)
    for inactive in plan.inactive:
        log.info("inactive provider: %s %s (%s): %s", inactive.api.value, inactive.provider_id, inactive.provider_type, inactive.hint())
