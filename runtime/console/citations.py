"""An output_text part's annotations as links, for the pages that show stored messages: a file
citation to the file's console page, a container file (written by code_interpreter's code) to its
download, a URL citation to its page when it is http or https (any
other scheme, `javascript:` say, is no link). Templates escape the text and the address; nothing
here is marked safe."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

__all__ = ["Link", "citations", "container_file_href"]

_WEB = re.compile(r"https?://", re.IGNORECASE)
"""The start of an address that may be a link: a browser takes it as http(s) whatever follows."""


@dataclass(frozen=True)
class Link:
    href: str
    text: str
    external: bool
    """A page off this server (opened with rel=noreferrer, in a new tab)."""


def citations(part: Any) -> list[Link]:
    """The links of a content part's annotations, each target once, in the order first cited (an
    answer often cites one file many times)."""
    annotations = part.get("annotations") if isinstance(part, Mapping) else None
    links: dict[str, Link] = {}
    for note in annotations if isinstance(annotations, list) else []:
        link = _link(note) if isinstance(note, Mapping) else None
        if link is not None and link.href not in links:
            links[link.href] = link
    return list(links.values())


def _link(note: Mapping[str, Any]) -> Link | None:
    kind = note.get("type")
    file_id = note.get("file_id")
    if kind == "file_citation" and isinstance(file_id, str) and file_id:
        return Link(f"/console/files/{quote(file_id, safe='')}", str(note.get("filename") or file_id), external=False)
    container_id = note.get("container_id")
    if kind == "container_file_citation" and isinstance(file_id, str) and file_id and isinstance(container_id, str) and container_id:
        return Link(container_file_href(container_id, file_id), str(note.get("filename") or file_id), external=False)
    if kind == "url_citation" and isinstance(note.get("url"), str) and _WEB.match(note["url"]):
        return Link(note["url"], str(note.get("title") or note["url"]), external=True)
    return None


def container_file_href(container_id: str, file_id: str) -> str:
    """Where the console downloads a container's file (through the API, as the signed-in principal)."""
    return f"/console/containers/{quote(container_id, safe='')}/files/{quote(file_id, safe='')}/content"
