"""Register entry points the way an installed distribution does: a dist-info folder on sys.path."""

from __future__ import annotations

from pathlib import Path


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
