"""Read a run.yaml (a path or a distribution's name) into a validated StackConfig."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from builder.config import ProviderEntry, StackConfig
from builder.envsubst import substitute, unset_references
from builder.errors import ConfigError
from builder.validation import validate_model

__all__ = [
    "DISTRIBUTIONS_DIR",
    "document_from_pairs",
    "find_config",
    "is_active",
    "list_distributions",
    "load_config",
    "missing_env",
    "parse_config",
]

DISTRIBUTIONS_DIR = Path(__file__).resolve().parent.parent / "distributions"


def list_distributions() -> list[str]:
    """The names of the distributions shipped with the package."""
    return sorted(p.parent.name for p in DISTRIBUTIONS_DIR.glob("*/run.yaml"))


def find_config(source: str | Path) -> Path:
    """A run.yaml path, or the run.yaml of the distribution named `source`."""
    path = Path(source).expanduser()
    if path.is_file():
        return path
    if path.is_dir() and (path / "run.yaml").is_file():
        return path / "run.yaml"
    named = DISTRIBUTIONS_DIR / str(source) / "run.yaml"
    if "/" not in str(source) and named.is_file():
        return named
    known = ", ".join(list_distributions()) or "none"
    raise ConfigError(f"{source}: no such file, and no distribution of that name (distributions: {known})")


def load_config(source: str | Path, env: Mapping[str, str], *, defer_unset: bool = False) -> StackConfig:
    """Read, substitute and validate the run.yaml at `source` (a path or distribution name)."""
    path = find_config(source)
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as error:
        raise ConfigError(f"not valid YAML: {error}", source=str(path)) from None
    except OSError as error:
        raise ConfigError(f"cannot read: {error.strerror}", source=str(path)) from None
    try:
        return parse_config(document, env, defer_unset=defer_unset)
    except ConfigError as error:
        raise error.with_source(str(path)) from None


def parse_config(document: Any, env: Mapping[str, str], *, defer_unset: bool = False) -> StackConfig:
    """Substitute `${env.*}` in a parsed document and validate it as a StackConfig.

    The `config` of a provider whose `enabled_if_env` variables are missing is left as written:
    that provider will not run, so its required variables need not be set. With `defer_unset`
    (`stack build`), so is the config of a provider that reads a variable this machine does not
    set: it is checked where the stack runs, with that machine's environment.
    """
    if document is None:
        document = {}
    if not isinstance(document, dict):
        raise ConfigError(f"<root>: expected a mapping of settings, got {type(document).__name__}")
    document = copy.deepcopy(document)
    inactive_configs = _set_aside_inactive_configs(document, env, defer_unset)
    substituted = substitute(document, env)
    for (api, index), config in inactive_configs.items():
        substituted["providers"][api][index]["config"] = config
    return validate_model(StackConfig, substituted)


def missing_env(entry: ProviderEntry, env: Mapping[str, str]) -> list[str]:
    """The `enabled_if_env` variables of `entry` that are unset or empty."""
    return [name for name in entry.enabled_if_env if not env.get(name)]


def is_active(entry: ProviderEntry, env: Mapping[str, str]) -> bool:
    return not missing_env(entry, env)


def _set_aside_inactive_configs(document: dict[str, Any], env: Mapping[str, str], defer_unset: bool) -> dict[tuple[str, int], Any]:
    aside: dict[tuple[str, int], Any] = {}
    providers = document.get("providers")
    if not isinstance(providers, dict):
        return aside
    for api, entries in providers.items():
        if not isinstance(entries, list):
            continue
        for index, entry in enumerate(entries):
            if not isinstance(entry, dict) or "config" not in entry:
                continue
            names = entry.get("enabled_if_env")
            if (isinstance(names, list) and any(not env.get(str(name)) for name in names)) or (
                    defer_unset and unset_references(entry["config"], env)):
                aside[(api, index)] = entry["config"]
                entry = dict(entry, config={})
                entries[index] = entry
    return aside


def document_from_pairs(pairs: str, name: str = "adhoc") -> dict[str, Any]:
    """A run.yaml document from `api=provider,api=provider` pairs, each with its sample config.

    The provider id is the provider type. Used by `--stack-config` in tests and for quick trials.
    """
    from builder.plugins import load_spec, parse_api  # stevedore, imported only for pairs

    providers: dict[str, list[dict[str, Any]]] = {}
    for index, pair in enumerate(part.strip() for part in pairs.split(",") if part.strip()):
        api_name, separator, provider_type = pair.partition("=")
        if not separator or not provider_type:
            raise ConfigError(f"{pair!r}: expected api=provider (pair {index + 1} of {pairs!r})")
        spec = load_spec(parse_api(api_name.strip(), ("pairs", index)), provider_type.strip())
        providers.setdefault(spec.api.value, []).append(
            {"provider_id": spec.name, "provider_type": spec.name, "config": copy.deepcopy(dict(spec.sample_config))}
        )
    return {"version": 1, "name": name, "providers": providers}
