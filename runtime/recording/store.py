"""The recordings directory: its index, its file format and atomic writes."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from runtime.recording.keys import HASH_IN_NAME, file_name, slug


class RecordingStore:
    """The recordings directory: a lazily built index of hash prefix -> file, and atomic writes.

    Only file names are indexed (cheap); a hit is read from disk each time, so a recording
    rewritten by another transport or process is never served stale.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._index: dict[str, Path] | None = None

    def find(self, key: str, canonical: Mapping[str, Any]) -> dict[str, Any] | None:
        """The recording for this request; rescans the directory once before giving up."""
        found = self._lookup(key, canonical)
        if found is None:
            self._index = None  # another process may have recorded it since we indexed
            found = self._lookup(key, canonical)
        return found

    def _lookup(self, key: str, canonical: Mapping[str, Any]) -> dict[str, Any] | None:
        path = self._scan().get(key[:HASH_IN_NAME])
        if path is None:
            return None
        try:
            record = _load(path)
        except FileNotFoundError:
            return None
        # A 12-hex prefix collision or a hand-edited request must not answer for this one.
        return record if record.get("request") == canonical else None

    def _scan(self) -> dict[str, Path]:
        if self._index is None:
            index: dict[str, Path] = {}
            if self.directory.is_dir():
                for path in self.directory.glob("*.json"):
                    short = path.stem.rpartition("-")[2]
                    if len(short) == HASH_IN_NAME and not path.name.startswith("."):
                        index[short] = path
            self._index = index
        return self._index

    def write(self, key: str, record: Mapping[str, Any]) -> Path:
        """Write `record` atomically (temp file + rename): readers never see half a file."""
        self.directory.mkdir(parents=True, exist_ok=True)
        target = self.directory / file_name(key, record["request"])
        text = json.dumps(record, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
        fd, temp = tempfile.mkstemp(dir=self.directory, prefix=f".{target.stem}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as file:
                file.write(text)
            os.replace(temp, target)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp)
            raise
        self._scan()[key[:HASH_IN_NAME]] = target
        return target

    def same_path(self, canonical: Mapping[str, Any]) -> list[tuple[Path, dict[str, Any]]]:
        """Recordings of requests to the same URL path (query ignored), for miss diagnostics."""
        route = str(canonical["path"]).partition("?")[0]
        prefix = slug(route)
        found: list[tuple[Path, dict[str, Any]]] = []
        for short, path in sorted(self._scan().items()):
            if path.name != f"{prefix}-{short}.json":
                continue
            with contextlib.suppress(FileNotFoundError, ValueError):
                record = _load(path)
                if str(record["request"]["path"]).partition("?")[0] == route:
                    found.append((path, record))
        return found


def _load(path: Path) -> dict[str, Any]:
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not a valid recording: {exc}") from exc
    if not isinstance(record, dict) or "request" not in record or "response" not in record:
        raise ValueError(f"{path}: not a valid recording: expected an object with request and response")
    return record

