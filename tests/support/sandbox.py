"""The sandboxes' runtime venv for tests: made once per machine (about a minute), then reused."""

from __future__ import annotations

import fcntl
from pathlib import Path

from builder.sandbox_venv import default_venv, make_runtime_venv, venv_python

__all__ = ["runtime_python"]


def runtime_python() -> Path:
    """The runtime venv's interpreter ($STACK_SANDBOX_VENV, else ~/.cache/stack/sandbox-venv), made if missing.
    A lock beside it keeps two test processes from making it at once."""
    venv = default_venv()
    python = venv_python(venv)
    if _complete(python):
        return python
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f".{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not _complete(python):
            make_runtime_venv(venv, quiet=True)
    return python


def _complete(python: Path) -> bool:
    """The venv is there with its packages (a venv whose pip install was cut short is not)."""
    site = list(python.parent.parent.glob("lib/python3*/site-packages"))
    return python.exists() and bool(site) and all((site[0] / package).is_dir() for package in ("numpy", "pandas", "matplotlib"))


BWRAP_MISSING = "bubblewrap (`bwrap`) is not installed here: `apt-get install bubblewrap` (.ci/run does)"
"""The reason the bubblewrap tests are skipped, the one case in which they are."""
