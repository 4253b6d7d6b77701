"""The provider contract: what a plugin package publishes.

A provider is one implementation of one API (inference, responses, files...). A package makes
it available by pointing an entry point at a `ProviderSpec` instance, in the group for that API:

    # the plugin's pyproject.toml
    [project.entry-points."stack.providers.inference"]
    my-llm = "my_package.provider:SPEC"

The entry-point name (`my-llm`) is the `provider_type` used in run.yaml. After `pip install
my-package` the provider is available; nothing else is configured.

The spec's `factory` is called with a `ProviderContext` and returns an async context manager
that yields the implementation. Code before the `yield` is the start-up hook, code after it the
shutdown hook; the stack enters providers in dependency order and leaves them in reverse, so a
provider may use its dependencies until its own shutdown finishes:

    @contextlib.asynccontextmanager
    async def create(ctx: ProviderContext[MyConfig]) -> AsyncIterator[MyLLM]:
        client = httpx2.AsyncClient(base_url=ctx.config.base_url)
        try:
            yield MyLLM(client)
        finally:
            await client.aclose()

    SPEC = ProviderSpec(api=Api.inference, name="my-llm", config_model=MyConfig, factory=create,
                        description="My model server")

On SIGTERM the server stops accepting requests and gives those under way `server.shutdown_grace_s`
to finish before it ends the rest and runs the shutdown hooks. An implementation that keeps state
about work in progress may define `begin_shutdown()` (synchronous, quick), called when that grace
period begins: work it ends from then on is ended by the shutdown, and it should record it so
(a response `failed` with that reason rather than `cancelled`). It may also define `end_streams()`,
called shortly before the grace period ends (the last two seconds of it, or its second half if it is
shorter): what it still streams to clients should end then with a last event of its own rather
than be cut when the server closes the connections.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    import httpx2

__all__ = [
    "AddressGuard",
    "ENTRY_POINT_GROUP_PREFIX",
    "MULTI_PROVIDER_APIS",
    "Api",
    "EmptyConfig",
    "HttpClientFactory",
    "HttpTransportFactory",
    "ProviderContext",
    "ProviderFactory",
    "ProviderSpec",
    "entry_point_group",
]


class Api(str, enum.Enum):
    """The APIs a stack can serve; each has one entry-point group of providers."""

    inference = "inference"
    responses = "responses"
    conversations = "conversations"
    tool_runtime = "tool_runtime"
    vector_stores = "vector_stores"
    files = "files"
    safety = "safety"
    prompts = "prompts"
    messages = "messages"
    batches = "batches"
    containers = "containers"
    sandboxes = "sandboxes"


MULTI_PROVIDER_APIS = frozenset({Api.inference, Api.tool_runtime})
"""APIs with several providers: inference routes each request by model, tool_runtime each tool by
its type. Every other API takes one provider."""

ENTRY_POINT_GROUP_PREFIX = "stack.providers."


def entry_point_group(api: Api) -> str:
    """The entry-point group whose names are the provider types of `api`."""
    return ENTRY_POINT_GROUP_PREFIX + api.value


class EmptyConfig(BaseModel):
    """The config model of a provider that takes no settings."""

    model_config = ConfigDict(extra="forbid")


ConfigT = TypeVar("ConfigT", bound=BaseModel)


@dataclass(frozen=True)
class ProviderContext(Generic[ConfigT]):
    """What a provider's factory receives.

    `deps` holds the implementation of every required API and of each optional API that is
    configured; an optional API that is not configured is absent. Where an API has several
    providers (inference routes by model) the dependency is the router over all of them.
    """

    api: Api
    provider_id: str
    config: ConfigT
    deps: Mapping[Api, Any]
    state_dir: Path
    databases: Callable[[str], Any]
    """Opens the storage backend that run.yaml's `storage.stores` assigns to a store name: a
    `runtime.storage.Database` (typed `Any` here so that the contract imports no storage driver;
    a provider annotates what it keeps, as the built-in ones do)."""
    http_client: HttpClientFactory
    """Builds the provider's pooled `httpx2.AsyncClient`. Every remote call goes through one of
    these (or through `http_transport`): it is where requests are recorded and replayed in
    tests. The provider closes it."""
    http_transport: HttpTransportFactory
    """The pooled transport under such a client, for hot paths that send prebuilt
    `httpx2.Request`s straight to it (skipping the client's per-request work), and for clients
    the provider builds itself (an `address_guard` checks each address it dials)."""
    loopback: Any = None
    """A `contract.loopback.Loopback`: requests to the stack's own routes, in process, for a
    principal (typed `Any` here as `databases` is; None where the runtime gives none)."""


AddressGuard = Callable[[str, str], bool]
"""(host, address) -> whether a connection to `host` may be made at that address (see runtime.security.netguard)."""


class HttpTransportFactory(Protocol):
    def __call__(self, *, max_connections: int = 256, connect_timeout: float = 5.0,
                 address_guard: AddressGuard | None = None) -> httpx2.AsyncBaseTransport: ...


class HttpClientFactory(Protocol):
    def __call__(
        self,
        *,
        base_url: str,
        timeout: float,
        connect_timeout: float = 5.0,
        headers: Mapping[str, str] | None = None,
        max_connections: int = 256,
    ) -> httpx2.AsyncClient: ...


ProviderFactory = Callable[[ProviderContext[Any]], AbstractAsyncContextManager[Any]]


@dataclass(frozen=True)
class ProviderSpec:
    """A provider, as published by an entry point. Frozen: the resolver never mutates it."""

    api: Api
    name: str
    config_model: type[BaseModel]
    factory: ProviderFactory
    requires: tuple[Api, ...] = ()
    optional: tuple[Api, ...] = ()
    pip_packages: tuple[str, ...] = ()
    description: str = ""
    sample_config: Mapping[str, Any] = field(default_factory=dict)
    """A config for `stack build --providers` and `api=provider` test stacks; env placeholders allowed."""
    config_packages: Callable[[Any], Sequence[str]] | None = None
    """The packages one config of this provider needs beyond `pip_packages` (a model a package
    ships, say): called by `stack build` with the validated config."""
