"""Resolve a StackConfig into a StackPlan: every provider loaded, validated and put in start order.

Nothing is started here; a plan that resolves is a stack that can start (up to its providers'
own start-up failures, such as an unreachable database).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from builder.config import RECORDING_MODES, ModelConfig, StackConfig
from builder.errors import ConfigError, PathPart, format_path
from builder.envsubst import unset_references
from builder.load import find_config, load_config, missing_env
from builder.plugins import PluginLoadError, load_spec, parse_api
from builder.validation import validate_model
from contract.spec import MULTI_PROVIDER_APIS, Api, ProviderSpec

__all__ = ["InactiveProvider", "PlannedProvider", "StackPlan", "load_plan", "resolve"]


@dataclass(frozen=True)
class PlannedProvider:
    """A provider that will run: its spec and its validated config."""

    api: Api
    provider_id: str
    spec: ProviderSpec
    config: BaseModel
    path: str
    """Where it is declared in run.yaml, e.g. `providers.inference[0]`."""
    deferred_env: tuple[str, ...] = ()
    """At `stack build` only: variables its config reads that the build machine does not set. Its
    config is then not validated here (`config` holds it as written) but where the stack runs."""


@dataclass(frozen=True)
class InactiveProvider:
    """A provider left out: the environment variables it needs are not set, or an API it
    requires has providers but none of them is active."""

    api: Api
    provider_id: str
    provider_type: str
    missing_env: tuple[str, ...]
    waiting_for: tuple[Api, ...] = ()

    def hint(self) -> str:
        if self.missing_env:
            return "set " + " and ".join(self.missing_env) + " to enable it"
        return "enable a provider of " + " and ".join(api.value for api in self.waiting_for) + " to enable it"


@dataclass(frozen=True)
class StackPlan:
    """A resolved stack: what to start, in which order, and what to serve."""

    config: StackConfig
    providers: tuple[PlannedProvider, ...]
    """In start order: every provider comes after the providers of the APIs it depends on."""
    served_apis: tuple[Api, ...]
    models: tuple[ModelConfig, ...]
    """The registered models whose provider is active."""
    inactive: tuple[InactiveProvider, ...]
    state_dir: Path
    recording_mode: str = "live"
    """live, record, replay or record-if-missing: how upstream HTTP exchanges are handled."""
    recordings_dir: Path = Path("recordings")

    def unavailable_apis(self) -> dict[Api, list[InactiveProvider]]:
        """APIs that run.yaml gives providers, none of them active (and not limited away by
        `apis:`): their routes answer 503 saying what to set."""
        active = set(self.apis)
        unavailable: dict[Api, list[InactiveProvider]] = {}
        for provider in self.inactive:
            if provider.api not in active and (self.config.apis is None or provider.api.value in self.config.apis):
                unavailable.setdefault(provider.api, []).append(provider)
        return unavailable

    def recording_mode_for(self, provider_id: str) -> str:
        """The recording mode of one provider's upstream traffic."""
        return self.config.recording.providers.get(provider_id, self.recording_mode)

    def providers_of(self, api: Api) -> tuple[PlannedProvider, ...]:
        return tuple(p for p in self.providers if p.api is api)

    @property
    def apis(self) -> tuple[Api, ...]:
        """Every API with a provider, in start order."""
        return tuple(dict.fromkeys(p.api for p in self.providers))


def load_plan(source: str | Path, env: Mapping[str, str] | None = None, *, for_build: bool = False) -> StackPlan:
    """Load the run.yaml at `source` (a path or distribution name) and resolve it. `for_build`:
    a provider config that reads a variable `env` does not set is left to be checked where the
    stack runs (`PlannedProvider.deferred_env`), as `stack build` needs no deployment's secrets.

    Every ConfigError names the file it is about."""
    env = os.environ if env is None else env
    config = load_config(source, env, defer_unset=for_build)
    try:
        return resolve(config, env, for_build=for_build)
    except ConfigError as error:
        raise error.with_source(str(find_config(source))) from None


def resolve(config: StackConfig, env: Mapping[str, str] | None = None, *, for_build: bool = False) -> StackPlan:
    """Load and validate every active provider, check dependencies and storage, order the start."""
    env = os.environ if env is None else env
    planned: dict[Api, list[PlannedProvider]] = {}
    inactive: list[InactiveProvider] = []
    for api_name, entries in config.providers.items():
        api = parse_api(api_name, ("providers", api_name))
        for index, entry in enumerate(entries):
            missing = missing_env(entry, env)
            if missing:
                inactive.append(InactiveProvider(api, entry.provider_id, entry.provider_type, tuple(missing)))
                continue
            path = ("providers", api_name, index)
            deferred = tuple(unset_references(entry.config, env)) if for_build else ()
            planned.setdefault(api, []).append(_plan_provider(api, entry.provider_id, entry.provider_type, entry.config, path, deferred))
    _check_provider_counts(planned)
    inactive += _cascade_inactive(planned, {p.api for p in inactive})
    _check_dependencies(planned)
    order = _start_order(planned)
    served = _served_apis(config, planned)
    _check_storage(config)
    models = _active_models(config, planned, {p.provider_id for p in inactive if p.api is Api.inference})
    return StackPlan(
        config=config,
        providers=tuple(p for api in order for p in planned[api]),
        served_apis=served,
        models=models,
        inactive=tuple(inactive),
        state_dir=_state_dir(config, env),
        recording_mode=_recording_mode(config, env),
        recordings_dir=Path(config.recording.directory or env.get("STACK_RECORDINGS_DIR") or "recordings").expanduser(),
    )


def _plan_provider(api: Api, provider_id: str, provider_type: str, raw: dict[str, Any], path: tuple[PathPart, ...],
                   deferred: tuple[str, ...] = ()) -> PlannedProvider:
    try:
        spec = load_spec(api, provider_type)
    except PluginLoadError as error:
        raise PluginLoadError(f"{format_path((*path, 'provider_type'))}: {error.message}") from error.__cause__
    if deferred:  # `stack build`: validated where the stack runs, whose environment sets these
        return PlannedProvider(api, provider_id, spec, spec.config_model.model_construct(**raw), format_path(path), deferred)
    config = validate_model(spec.config_model, raw, (*path, "config"))
    return PlannedProvider(api, provider_id, spec, config, format_path(path))


def _check_provider_counts(planned: Mapping[Api, list[PlannedProvider]]) -> None:
    for api, providers in planned.items():
        if len(providers) > 1 and api not in MULTI_PROVIDER_APIS:
            ids = ", ".join(p.provider_id for p in providers)
            raise ConfigError(
                f"providers.{api.value}: {len(providers)} providers are configured ({ids}), but the "
                f"{api.value} API does not route between providers: keep exactly one"
            )


def _cascade_inactive(planned: dict[Api, list[PlannedProvider]], inactive_apis: set[Api]) -> list[InactiveProvider]:
    """Leave out providers that require an API whose every provider is inactive (the starter
    enables responses only once some inference provider is active), until nothing changes."""
    left_out: list[InactiveProvider] = []
    changed = True
    while changed:
        changed = False
        for api, providers in list(planned.items()):
            for provider in list(providers):
                waiting = tuple(dep for dep in provider.spec.requires if dep not in planned and dep in inactive_apis)
                if waiting:
                    providers.remove(provider)
                    left_out.append(InactiveProvider(api, provider.provider_id, provider.spec.name, (), waiting))
                    changed = True
            if not providers:
                del planned[api]
                inactive_apis.add(api)
    return left_out


def _check_dependencies(planned: Mapping[Api, list[PlannedProvider]]) -> None:
    for providers in planned.values():
        for provider in providers:
            for needed in provider.spec.requires:
                if needed not in planned:
                    raise ConfigError(
                        f"{provider.path}: provider {provider.spec.name!r} requires the {needed.value!r} API, "
                        f"which has no provider configured (add one under providers.{needed.value})"
                    )


def _dependencies(api: Api, planned: Mapping[Api, list[PlannedProvider]]) -> list[Api]:
    needed: dict[Api, None] = {}
    for provider in planned[api]:
        for dep in (*provider.spec.requires, *provider.spec.optional):
            if dep in planned:
                needed[dep] = None
    return list(needed)


def _start_order(planned: Mapping[Api, list[PlannedProvider]]) -> list[Api]:
    """Depth-first topological order of the configured APIs; a cycle is a ConfigError."""
    order: list[Api] = []
    state: dict[Api, str] = {}

    def visit(api: Api, trail: list[Api]) -> None:
        if state.get(api) == "done":
            return
        if state.get(api) == "visiting":
            cycle = trail[trail.index(api):] + [api]
            raise ConfigError("dependency cycle between providers: " + " -> ".join(a.value for a in cycle))
        state[api] = "visiting"
        for dep in _dependencies(api, planned):
            visit(dep, [*trail, api])
        state[api] = "done"
        order.append(api)

    for api in planned:
        visit(api, [])
    return order


def _served_apis(config: StackConfig, planned: Mapping[Api, list[PlannedProvider]]) -> tuple[Api, ...]:
    if config.apis is None:
        return tuple(planned)
    served: list[Api] = []
    for index, name in enumerate(config.apis):
        api = parse_api(name, ("apis", index))
        if api not in planned:
            raise ConfigError.at(
                ("apis", index),
                f"API {name!r} is listed to be served, but no active provider is configured for it "
                f"(add one under providers.{name})",
            )
        served.append(api)
    return tuple(served)


def _check_storage(config: StackConfig) -> None:
    declared = set(config.storage.backends) | {"default"}
    for store, backend in config.storage.stores.model_dump().items():
        if backend not in declared:
            raise ConfigError.at(
                ("storage", "stores", store),
                f"unknown backend {backend!r} (declared under storage.backends: {', '.join(sorted(declared))})",
            )


def _active_models(
    config: StackConfig, planned: Mapping[Api, list[PlannedProvider]], inactive_ids: set[str]
) -> tuple[ModelConfig, ...]:
    """The registered models, each with the deployments whose provider is active (a model with
    none left is dropped, as a provider's own models are with it); every provider a deployment
    names must be an inference provider, and every fallback a model that can be served."""
    inference_ids = {p.provider_id for p in planned.get(Api.inference, [])}
    active: list[ModelConfig] = []
    for index, model in enumerate(config.models):
        where: tuple[PathPart, ...] = ("models", index) if model.provider_id is not None else ("models", index, "deployments")
        deployments = []
        for number, deployment in enumerate(model.served_by()):
            if deployment.provider_id in inactive_ids:
                continue
            if deployment.provider_id not in inference_ids:
                known = ", ".join(sorted(inference_ids)) or "none active"
                path = (*where, "provider_id") if model.provider_id is not None else (*where, number, "provider_id")
                raise ConfigError.at(path, f"{deployment.provider_id!r} is not an inference provider (inference providers: {known})")
            deployments.append(deployment)
        if not deployments:
            continue
        active.append(model if model.provider_id is not None else model.model_copy(update={"deployments": deployments}))
    _check_fallbacks(config, inference_ids | inactive_ids)
    return tuple(active)


def _check_fallbacks(config: StackConfig, provider_ids: set[str]) -> None:
    """A fallback names a registered model or `provider_id/model`; no model falls back to itself,
    however many steps away."""
    registered = {model.model_id: model for model in config.models}
    for index, model in enumerate(config.models):
        for field in ("fallbacks", "context_window_fallbacks", "content_policy_fallbacks"):
            for number, name in enumerate(getattr(model, field)):
                if name not in registered and name.partition("/")[0] not in provider_ids:
                    raise ConfigError.at(("models", index, field, number), (
                        f"{name!r} is not a model of this stack (a models: entry's model_id, or provider_id/model of an "
                        f"inference provider)"))
    for index, model in enumerate(config.models):
        cycle = _fallback_cycle(model.model_id, registered)
        if cycle:
            raise ConfigError.at(("models", index, "fallbacks"), f"the fallbacks go round in a cycle: {' -> '.join(cycle)}")


def _fallback_cycle(start: str, registered: Mapping[str, ModelConfig]) -> list[str]:
    """The path from `start` back to itself through the models' fallbacks, if there is one."""
    path: list[str] = [start]
    seen: set[str] = set()

    def visit(name: str) -> bool:
        for following in registered[name].every_fallback() if name in registered else ():
            if following == start:
                path.append(following)
                return True
            if following in seen:
                continue
            seen.add(following)
            path.append(following)
            if visit(following):
                return True
            path.pop()
        return False

    return path if visit(start) else []


def _recording_mode(config: StackConfig, env: Mapping[str, str]) -> str:
    if config.recording.mode is not None:
        return config.recording.mode
    mode = env.get("STACK_RECORDING_MODE") or "live"
    if mode not in RECORDING_MODES:
        raise ConfigError(f"STACK_RECORDING_MODE: {mode!r} is not a recording mode (expected one of: {', '.join(RECORDING_MODES)})")
    return mode


def _state_dir(config: StackConfig, env: Mapping[str, str]) -> Path:
    if config.state_dir is not None:
        return config.state_dir.expanduser()
    root = env.get("STACK_STATE_DIR") or "~/.stack"
    return Path(root).expanduser() / config.name
