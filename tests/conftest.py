"""Fixtures for the whole suite: real entry points for specimen providers, real plugin packages."""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from builder.plugins import forget_cached_entry_points
from contract.spec import entry_point_group
from support import specimens
from support.entry_points import write_distribution

# stevedore caches entry points per sys.path under XDG_CACHE_HOME; keep the suite's out of ~/.cache
# (in a directory of its own, removed when the suite ends).
if "XDG_CACHE_HOME" not in os.environ:
    # pip's cache is left where it was (it would follow XDG_CACHE_HOME): tests that build virtual
    # environments reuse the wheels this project's own install built (llama.cpp's, minutes to compile).
    os.environ.setdefault("PIP_CACHE_DIR", str(Path.home() / ".cache" / "pip"))
    os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="stack-tests-cache-")
    atexit.register(shutil.rmtree, os.environ["XDG_CACHE_HOME"], ignore_errors=True)

PLUGINS_DIR = Path(__file__).parent / "plugins"


@pytest.fixture
def specimen_providers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The specimen providers of `support.specimens`, registered as entry points; yields EVENTS."""
    site = tmp_path / "site"
    groups = {entry_point_group(api): entries for api, entries in specimens.ENTRY_POINTS.items()}
    write_distribution(site, "stack-specimen-providers", groups)
    monkeypatch.syspath_prepend(str(site))
    forget_cached_entry_points()
    specimens.EVENTS.clear()
    yield specimens.EVENTS
    forget_cached_entry_points()


@pytest.fixture(scope="session")
def plugin_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The packages under tests/plugins, installed with pip into a directory of their own."""
    site = tmp_path_factory.mktemp("plugin-site")
    # Built from copies: setuptools writes build/ and *.egg-info next to the sources it builds.
    sources = tmp_path_factory.mktemp("plugin-sources")
    packages = [
        shutil.copytree(path, sources / path.name)
        for path in sorted(PLUGINS_DIR.iterdir())
        if (path / "pyproject.toml").is_file()
    ]
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
         "--no-index", "--target", str(site), *map(str, packages)],
        check=True,
        capture_output=True,
    )
    return site


@pytest.fixture
def installed_plugins(plugin_site: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The tests/plugins packages importable in this process, as after `pip install`."""
    monkeypatch.syspath_prepend(str(plugin_site))
    forget_cached_entry_points()
    yield plugin_site
    forget_cached_entry_points()
