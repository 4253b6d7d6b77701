"""The contract of web search backends: what the `web_search` tool asks of a search engine.

The tool itself (items, events, citations) is one implementation shared by every backend
(providers/tool_runtime/web_search); a backend only turns a `WebQuery` into `WebPage`s. A third
party's backend implements `SearchBackend` and publishes a tool_runtime provider built with
`providers.tool_runtime.web_search.web_search_runtime`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urlsplit

__all__ = ["SearchBackend", "WEB_SEARCH_TYPES", "WebPage", "WebQuery", "domain_allowed"]

WEB_SEARCH_TYPES = frozenset({"web_search", "web_search_2025_08_26", "web_search_preview", "web_search_preview_2025_03_11"})
"""The `tools[].type` names of OpenAI's web search tool."""


@dataclass(frozen=True)
class WebQuery:
    query: str
    max_results: int
    allowed_domains: tuple[str, ...] = ()
    """Only pages of these domains (and their subdomains); none: any."""
    country: str | None = None
    """Two-letter ISO code, from the request's `user_location`."""
    region: str | None = None
    city: str | None = None
    timezone: str | None = None


@dataclass(frozen=True)
class WebPage:
    url: str
    title: str
    text: str
    """What the engine says of the page (a snippet or extracted content), as plain text."""


class SearchBackend(Protocol):
    async def search(self, query: WebQuery) -> Sequence[WebPage]:
        """The engine's results, best first. Raises on failure (any exception): the tool marks
        its call `failed` and the response goes on."""


def domain_allowed(url: str, domains: Sequence[str]) -> bool:
    """Whether the URL's host is one of `domains` or a subdomain of one (any, when none are given)."""
    if not domains:
        return True
    host = (urlsplit(url).hostname or "").lower().rstrip(".")
    return any(host == domain or host.endswith("." + domain) for domain in (d.lower().strip().rstrip(".") for d in domains))
