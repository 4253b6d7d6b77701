"""Fixtures for the whole suite: real entry points for specimen providers, real plugin packages."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from builder.plugins import forget_cached_entry_points
from providers.spec import entry_point_group
from support import specimens

# stevedore caches entry points per sys.path under XDG_CACHE_HOME; keep the suite's out of ~/.cache.
os.environ.setdefault("XDG_CACHE_HOME", tempfile.mkdtemp(prefix="stack-tests-cache-"))

PLUGINS_DIR = Path(__file__).parent / "plugins"


def write_distribution(site: Path, name: str, groups: dict[str, dict[str, str]]) -> None:
    """Write the metadata of an installed distribution that declares these entry points."""
    dist_info = site / f"{name.replace('-', '_')}-1.0.dist-info"
    dist_info.mkdir(parents=True, exist_ok=True)
    (dist_info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    lines = []
    for group, entries in groups.items():
        lines.append(f"[{group}]")
        lines.extend(f"{entry} = {target}" for entry, target in entries.items())
    (dist_info / "entry_points.txt").write_text("\n".join(lines) + "\n")


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
    packages = [str(path) for path in sorted(PLUGINS_DIR.iterdir()) if (path / "pyproject.toml").is_file()]
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
         "--no-index", "--target", str(site), *packages],
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
