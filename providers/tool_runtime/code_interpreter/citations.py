"""The answer's links to files the code wrote become `container_file_citation` annotations.

The model is told to link a file it made as `sandbox:/mnt/data/<path>` (OpenAI's convention, which
models trained on its code interpreter follow); the text is left as written, and the annotation
spans the link's target. A file the answer never mentions is cited at its end (a zero-width span),
so a client that offers generated files for download from annotations gets every one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["ContainerFileCitations"]

Annotation = dict[str, Any]

# `sandbox:/mnt/data/x.png` or a bare `/mnt/data/x.png`; a path ends at whitespace, quotes or brackets.
_LINK = re.compile(r"(?:sandbox:)?/mnt/data/([^\s()\[\]<>\"'`]+)")
_TRAILING = ".,;:!?"
_BOUNDARY = re.compile(r"[\s()\[\]<>\"'`]")
_PREFIXES = ("sandbox:/mnt/data/", "/mnt/data/")


class ContainerFileCitations:
    """Implements contract.tool_runtime.protocol.Citations over the files the session's code wrote."""

    def __init__(self, files: Sequence[Mapping[str, Any]]) -> None:
        self.files = {str(file["path"]).removeprefix("/mnt/data/"): file for file in files}
        self._held = ""
        self._length = 0
        self._cited: set[str] = set()

    def feed(self, text: str) -> tuple[str, list[Annotation]]:
        self._held += text
        return self._drain(final=False)

    def finish(self) -> tuple[str, list[Annotation]]:
        text, annotations = self._drain(final=True)
        for relative, file in self.files.items():
            if relative not in self._cited:
                annotations.append(_annotation(file, self._length, self._length))
        return text, annotations

    def _drain(self, final: bool) -> tuple[str, list[Annotation]]:
        # Text is held back only while its end may be the start of a link or a link not ended yet.
        keep = len(self._held) if final else _undecided(self._held)
        out, self._held = self._held[:keep], self._held[keep:]
        annotations: list[Annotation] = []
        for match in _LINK.finditer(out):
            relative = match.group(1).rstrip(_TRAILING)
            file = self.files.get(relative)
            if file is None:
                continue
            start = self._length + match.start()
            end = start + len(match.group(0)) - (len(match.group(1)) - len(relative))
            annotations.append(_annotation(file, start, end))
            self._cited.add(relative)
        self._length += len(out)
        return out, annotations


def _undecided(text: str) -> int:
    """Where the last word of `text` begins if it may be (or begin) a link; else its end."""
    boundaries = [match.end() for match in _BOUNDARY.finditer(text)]
    start = boundaries[-1] if boundaries else 0
    tail = text[start:]
    if tail and ("/mnt/data/" in tail or any(prefix.startswith(tail) for prefix in _PREFIXES)):
        return start
    return len(text)


def _annotation(file: Mapping[str, Any], start: int, end: int) -> Annotation:
    return {"type": "container_file_citation", "container_id": file["container_id"], "file_id": file["id"],
            "filename": str(file["path"]).rsplit("/", 1)[-1], "start_index": start, "end_index": end}
