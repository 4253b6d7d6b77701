"""Config errors: one message that names the YAML path, the bad value and what was expected."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["ConfigError", "format_path"]

PathPart = str | int


def format_path(path: Sequence[PathPart]) -> str:
    """`("providers", "inference", 0, "config")` -> `providers.inference[0].config`."""
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else part
    return text or "<root>"


class ConfigError(Exception):
    """A run.yaml that cannot be resolved. `str(error)` is the whole user-facing message."""

    def __init__(self, message: str, *, source: str | None = None) -> None:
        self.message = message
        self.source = source
        super().__init__(f"{source}: {message}" if source else message)

    def with_source(self, source: str) -> ConfigError:
        """The same error, said of the file `source` (the class and the chained cause are kept)."""
        located = type(self)(self.message, source=source)
        located.__cause__ = self.__cause__
        return located

    @classmethod
    def at(cls, path: Sequence[PathPart], message: str) -> ConfigError:
        return cls(f"{format_path(path)}: {message}")
