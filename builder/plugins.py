"""Provider discovery: entry points in one group per API, loaded with stevedore."""

from __future__ import annotations

import functools
import importlib.metadata
from dataclasses import dataclass
from typing import Protocol

from stevedore import DriverManager, ExtensionManager
from stevedore.exception import NoMatches

from builder.errors import ConfigError, PathPart
from contract.spec import Api, ProviderSpec, entry_point_group

__all__ = [
    "InstalledProvider",
    "PluginLoadError",
    "forget_cached_entry_points",
    "installed_providers",
    "load_spec",
    "parse_api",
    "provider_distribution",
    "provider_names",
]


def parse_api(name: str, path: tuple[PathPart, ...]) -> Api:
    """The API run.yaml names at `path`, or a ConfigError listing the known ones."""
    try:
        return Api(name)
    except ValueError:
        known = ", ".join(api.value for api in Api)
        raise ConfigError.at(path, f"unknown API {name!r} (expected one of: {known})") from None


class PluginLoadError(ConfigError):
    """A provider named in run.yaml whose entry point is missing, broken or not a ProviderSpec."""


@dataclass(frozen=True)
class InstalledProvider:
    """One entry point of a provider group: its spec, or why it could not be loaded."""

    api: Api
    name: str
    target: str
    distribution: str | None
    spec: ProviderSpec | None
    error: str | None


def provider_names(api: Api) -> list[str]:
    """The provider types installed for `api`, without importing them."""
    return sorted(set(_installed().select(group=entry_point_group(api)).names))


def load_spec(api: Api, name: str) -> ProviderSpec:
    """Load the spec that entry point `name` of `api`'s group points at.

    Raises PluginLoadError naming the entry point; an import error is chained as the cause.
    """
    group = entry_point_group(api)
    registered = _installed().select(group=group, name=name)
    if not registered:
        # Refused before stevedore looks: its DriverManager drops `on_missing_entrypoints_callback`
        # (stevedore 5.10) and logs "Could not load <name>" as a WARNING before raising NoMatches,
        # a line printed before this error, which says the same and more.
        raise _unknown_provider(api, name)
    if len({ep.value for ep in registered}) > 1:
        # Only now the distributions' names: each is read from its METADATA file (2 ms apiece).
        owners = {ep.value: ep.dist.name if ep.dist else "?" for ep in registered}
        listing = ", ".join(f"{target} (from {dist})" for target, dist in sorted(owners.items()))
        raise PluginLoadError(f"provider {name!r} is registered more than once in group {group!r}: {listing}; uninstall one of them")
    try:
        manager: DriverManager[ProviderSpec] = DriverManager(
            group, name, on_missing_entrypoints_callback=None
        )
    except NoMatches:  # (stevedore's cache of entry points disagreeing with importlib.metadata's)
        raise _unknown_provider(api, name) from None
    except Exception as error:
        raise PluginLoadError(
            f"provider {name!r} (entry point {name!r} in group {group!r}) failed to load: "
            f"{type(error).__name__}: {error}"
        ) from error
    target = manager.extensions[0].entry_point.value
    return _checked_spec(api, name, target, manager.driver)


def _unknown_provider(api: Api, name: str) -> PluginLoadError:
    installed = ", ".join(provider_names(api)) or "none"
    return PluginLoadError(f"unknown provider {name!r} for API {api.value!r} (installed: {installed})")


def installed_providers(api: Api) -> list[InstalledProvider]:
    """Every provider entry point of `api`, loaded; broken ones are listed with their error."""
    failures: dict[str, str] = {}

    def on_failure(_manager: object, entry_point: object, error: BaseException) -> None:
        failures[getattr(entry_point, "name", "?")] = f"{type(error).__name__}: {error}"

    manager: ExtensionManager[ProviderSpec] = ExtensionManager(
        entry_point_group(api), on_load_failure_callback=on_failure
    )
    # stevedore's cached entry points do not keep their distribution; importlib.metadata's do.
    owners = {ep.name: ep.dist.name for ep in _installed().select(group=entry_point_group(api)) if ep.dist}
    listing: list[InstalledProvider] = []
    for entry_point in manager.list_entry_points():
        dist = owners.get(entry_point.name)
        spec: ProviderSpec | None = None
        error = failures.get(entry_point.name)
        if error is None and entry_point.name in manager:
            try:
                spec = _checked_spec(api, entry_point.name, entry_point.value, manager[entry_point.name].plugin)
            except PluginLoadError as bad:
                error = bad.message
        listing.append(InstalledProvider(api, entry_point.name, entry_point.value, dist, spec, error))
    return sorted(listing, key=lambda item: item.name)


def provider_distribution(api: Api, name: str) -> str | None:
    """`name==version` of the installed package that registers provider `name`, if any."""
    for entry_point in _installed().select(group=entry_point_group(api), name=name):
        if entry_point.dist is not None:
            return f"{entry_point.dist.name}=={entry_point.dist.version}"
    return None


def forget_cached_entry_points() -> None:
    """Drop the per-process caches (stevedore's and this module's), so packages installed since are seen."""
    ExtensionManager.ENTRY_POINT_CACHE.clear()
    _installed.cache_clear()


class _EntryPoints(Protocol):
    """What `importlib.metadata.entry_points()` returns: on Python 3.11 a (deprecated) mapping of
    groups, on later versions the list itself; `select` with parameters is the same on both."""

    def select(self, *, name: str = ..., group: str = ...) -> importlib.metadata.EntryPoints: ...


@functools.cache
def _installed() -> _EntryPoints:
    """Every installed entry point, with its distribution: read once per process, as stevedore
    reads its own. Each read opens every installed distribution's entry_points.txt (3.5 ms here);
    a stack of nine providers read them nine times before, 8 % of the starter's start-up."""
    return importlib.metadata.entry_points()


def _checked_spec(api: Api, name: str, target: str, loaded: object) -> ProviderSpec:
    where = f"entry point {name!r} ({target}) in group {entry_point_group(api)!r}"
    if not isinstance(loaded, ProviderSpec):
        raise PluginLoadError(f"{where} is a {type(loaded).__name__}, expected a contract.spec.ProviderSpec")
    if loaded.api is not api:
        raise PluginLoadError(f"{where} declares api {loaded.api.value!r}, expected {api.value!r}")
    if loaded.name != name:
        raise PluginLoadError(f"{where} declares name {loaded.name!r}, expected {name!r}")
    return loaded
