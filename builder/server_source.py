"""Where a build installs the server from: the very code that runs `stack build`.

The `stack` distribution is not on any package index under that name (another project may be),
so `stack==<version>` resolves only where the server was installed from one. The build looks at
the code that runs it:

- it runs from a checkout (`pip install -e .`, or a source tree on the path: a pyproject.toml of
  project `stack` beside its packages): a wheel of that checkout is built into `<output>/wheels/`,
  and the requirement is that file;
- it was installed from a wheel file that is still there (PEP 610's `direct_url.json`): the wheel
  is copied into `<output>/wheels/`;
- it was installed from an index: `stack==<version>`, from that index.

`STACK_BUILD_SERVER_REQUIREMENT` overrides all of it (any requirement line; empty leaves the
server out). A wheel's requirement is a path relative to the output directory, which is where
`stack build --venv` and the Containerfile install from.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

from builder.errors import ConfigError

__all__ = ["SERVER_REQUIREMENT_ENV", "ServerSource", "WHEELS_DIR", "locate_server"]

SERVER_REQUIREMENT_ENV = "STACK_BUILD_SERVER_REQUIREMENT"
WHEELS_DIR = "wheels"


@dataclass(frozen=True)
class ServerSource:
    """How the deployed server is installed."""

    requirement: str
    """The requirements.txt line ("" leaves the server out); for a checkout, set by `materialize`."""
    checkout: Path | None = None
    """A source tree to build a wheel of."""
    wheel: Path | None = None
    """A wheel file to copy."""
    origin: str = ""
    """Where it comes from, for the build's output."""

    def materialize(self, output: Path) -> ServerSource:
        """The wheel built or copied into `output/wheels`, and the requirement naming it there."""
        if self.checkout is None and self.wheel is None:
            return self
        wheels = output / WHEELS_DIR
        wheels.mkdir(parents=True, exist_ok=True)
        for stale in wheels.glob("stack-*.whl"):
            stale.unlink()
        if self.checkout is not None:
            built = _build_wheel(self.checkout, wheels)
        else:
            assert self.wheel is not None
            built = Path(shutil.copy2(self.wheel, wheels))
        return ServerSource(f"./{WHEELS_DIR}/{built.name}", origin=f"{self.origin}: {WHEELS_DIR}/{built.name}")


def locate_server(env: Mapping[str, str]) -> ServerSource:
    """Where this server was installed from, as a build should install it."""
    override = env.get(SERVER_REQUIREMENT_ENV)
    if override is not None:
        line = override.strip()
        return ServerSource(line, origin=f"{line or 'left out'} ({SERVER_REQUIREMENT_ENV})")
    try:
        distribution = importlib.metadata.distribution("stack")
    except importlib.metadata.PackageNotFoundError:
        raise ConfigError(
            f"the stack package is not installed, so where to install it from is unknown: set {SERVER_REQUIREMENT_ENV} "
            "to what should install the server (or to an empty value to leave it out)"
        ) from None
    version = distribution.version
    checkout = _running_checkout()
    if checkout is not None:
        return ServerSource("", checkout=checkout, origin=f"stack {version} from the checkout {checkout}, as a wheel built now")
    direct = _direct_url(distribution)
    if direct is not None and direct.suffix == ".whl" and direct.is_file():
        return ServerSource("", wheel=direct, origin=f"stack {version} from the wheel {direct}, copied")
    return ServerSource(f"stack=={version}", origin=f"stack=={version}, from the package index it was installed from")


def _running_checkout() -> Path | None:
    """The source tree this very code runs from (an editable install, or a checkout on the path),
    told by the project file beside its packages; None when it runs from site-packages."""
    root = Path(__file__).resolve().parents[1]
    try:
        project = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8")).get("project", {})
    except (OSError, tomllib.TOMLDecodeError):
        return None
    return root if project.get("name") == "stack" else None


def _direct_url(distribution: importlib.metadata.Distribution) -> Path | None:
    """The local file this distribution was installed from (PEP 610's direct_url.json), if any."""
    text = distribution.read_text("direct_url.json")
    if not text:
        return None
    try:
        record = json.loads(text)
    except ValueError:
        return None
    url = urlsplit(str(record.get("url", "")))
    if url.scheme != "file" or "dir_info" in record:
        return None
    return Path(unquote(url.path))


def _build_wheel(checkout: Path, wheels: Path) -> Path:
    # Built from a copy of what the wheel holds (the project file, the README it names, the
    # packages), not in the checkout, where setuptools would leave build/ and an egg-info behind.
    # Without build isolation when setuptools is at hand (no download of a build environment);
    # pip makes one otherwise.
    isolation = [] if importlib.util.find_spec("setuptools") is None else ["--no-build-isolation"]
    with tempfile.TemporaryDirectory(prefix="stack-build-") as staging:
        source = Path(staging) / "stack"
        _stage(checkout, source)
        command = [sys.executable, "-m", "pip", "wheel", "--quiet", "--disable-pip-version-check", "--no-deps", *isolation,
                   "--wheel-dir", str(wheels), str(source)]
        done = subprocess.run(command, capture_output=True, text=True, errors="replace", check=False)
    built = sorted(wheels.glob("stack-*.whl"))
    if done.returncode != 0 or not built:
        raise ConfigError(f"building a wheel of the server from {checkout} failed (pip wheel, exit status {done.returncode}): "
                          f"{(done.stderr or done.stdout).strip()[-500:]}")
    return built[-1]


def _stage(checkout: Path, source: Path) -> None:
    """The project file, its README and the top-level packages it lists (`tool.setuptools.packages.find`)."""
    project = tomllib.loads((checkout / "pyproject.toml").read_text(encoding="utf-8"))
    packages = project.get("tool", {}).get("setuptools", {}).get("packages", {}).get("find", {}).get("include", [])
    source.mkdir()
    for name in ("pyproject.toml", str(project.get("project", {}).get("readme") or "README.md")):
        shutil.copy2(checkout / name, source / name)
    for package in dict.fromkeys(str(pattern).rstrip("*").rstrip(".") for pattern in packages):
        if (checkout / package).is_dir():
            shutil.copytree(checkout / package, source / package, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
