"""`${env.NAME}` and `${env.NAME:=default}` substitution over a parsed YAML document."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from builder.errors import ConfigError, PathPart, format_path

__all__ = ["substitute", "unset_references"]

_REFERENCE = re.compile(r"\$\{env\.([A-Za-z_][A-Za-z0-9_]*)(?::=([^}]*))?\}")
_MALFORMED = re.compile(r"\$\{env\.[^}]*\}?")


def substitute(value: Any, env: Mapping[str, str], path: tuple[PathPart, ...] = ()) -> Any:
    """Return `value` with every `${env.NAME}` reference in its strings replaced.

    `${env.NAME}` requires NAME to be set; `${env.NAME:=default}` falls back to `default` when
    NAME is unset or empty. Values stay strings: the config models convert them, so a bad value
    is reported with its type error at its own path.
    """
    if isinstance(value, str):
        return _substitute_string(value, env, path)
    if isinstance(value, dict):
        return {key: substitute(item, env, (*path, str(key))) for key, item in value.items()}
    if isinstance(value, list):
        return [substitute(item, env, (*path, index)) for index, item in enumerate(value)]
    return value


def _substitute_string(text: str, env: Mapping[str, str], path: tuple[PathPart, ...]) -> str:
    def replace(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        found = env.get(name)
        if found:
            return found
        if default is not None:
            return default
        raise ConfigError(
            f"{format_path(path)}: environment variable {name} is not set "
            f"(set it, or write ${{env.{name}:=default}} to give a default)"
        )

    result = _REFERENCE.sub(replace, text)
    leftover = _MALFORMED.search(_REFERENCE.sub("", text))
    if leftover:
        raise ConfigError(
            f"{format_path(path)}: malformed reference {leftover.group(0)!r} "
            "(expected ${env.NAME} or ${env.NAME:=default})"
        )
    return result


def unset_references(value: Any, env: Mapping[str, str]) -> list[str]:
    """The variables `value` reads with `${env.NAME}` (no default) that `env` does not set, in order."""
    if isinstance(value, str):
        return [match.group(1) for match in _REFERENCE.finditer(value) if match.group(2) is None and not env.get(match.group(1))]
    if isinstance(value, dict):
        return list(dict.fromkeys(name for item in value.values() for name in unset_references(item, env)))
    if isinstance(value, list):
        return list(dict.fromkeys(name for item in value for name in unset_references(item, env)))
    return []
