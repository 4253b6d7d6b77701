"""The sandboxes' runtime venv: the interpreter and packages that code_interpreter's code gets.

A venv of its own, apart from the server's: the code in a sandbox sees this venv (read-only) and
nothing of the server's packages. `stack sandbox setup` makes it; the bubblewrap provider's
`python` setting points at its interpreter.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

__all__ = ["DEFAULT_VENV", "RUNTIME_PACKAGES", "default_venv", "make_runtime_venv", "venv_python"]

DEFAULT_VENV = Path("~/.cache/stack/sandbox-venv")

RUNTIME_PACKAGES = ("numpy", "pandas", "matplotlib")
"""What the code may import beyond the standard library, as on OpenAI's code interpreter (its most used part)."""


def default_venv() -> Path:
    """`STACK_SANDBOX_VENV` if set, else ~/.cache/stack/sandbox-venv."""
    return Path(os.environ.get("STACK_SANDBOX_VENV") or DEFAULT_VENV).expanduser()


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def make_runtime_venv(venv: Path, packages: tuple[str, ...] = RUNTIME_PACKAGES, *, quiet: bool = False) -> Path:
    """Make (or complete) the venv at `venv` with `packages` from the package index; its interpreter's path.
    Raises `subprocess.CalledProcessError` if venv or pip fails (their output has said why)."""
    output = subprocess.DEVNULL if quiet else None
    python = venv_python(venv)
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, stdout=output)
    subprocess.run([str(python), "-m", "pip", "install", "--disable-pip-version-check", "--quiet", *packages],
                   check=True, stdout=output)
    return python
