"""The `web_search` tool (also `web_search_preview` and the dated names): the model searches the
web through the configured backend (backends.py: Tavily, Brave, SearXNG), and cites the pages it
uses.

The model is offered `web_search(query)`, and, when the provider may read pages, `open_page(url)`
and `find_in_page(url, pattern)`. Each call becomes a `web_search_call` item (`in_progress`,
`searching`, `completed` or `failed`) with its action: `search` (the pages found are its
`sources`: `url`, and the `title` and `text` the model read, shown to the client only when
`include` asks for `web_search_call.action.sources`), `open_page` or `find_in_page` (what the
model read of the page is kept on the item for the model alone, never shown). Pages are fetched
through the address policy of runtime.security.netguard: public addresses only, unless run.yaml allows
others. The model reads the pages
numbered, and the answer's citations of those numbers become `url_citation` annotations over the
sentence that cites them (contract.tool_runtime.citations). A backend that fails or times out
fails the call, not the response: the model is told the search failed.
"""

from __future__ import annotations

import asyncio
import html
import json
import logging
import re
from collections.abc import Mapping, Sequence
from typing import Any

import httpx2

from contract.items import new_id
from contract.tool_runtime.citations import MarkerCitations, Source, numbered_sources
from contract.tool_runtime.protocol import FunctionSpec, ItemSink, ModelCall, PublicTool, Step, ToolContext, ToolExchange
from contract.tool_runtime.web_search import WEB_SEARCH_TYPES, SearchBackend, WebPage, WebQuery, domain_allowed
from contract.errors import InvalidRequestError
from runtime.security.netguard import AddressPolicy
from providers.text import html_text

__all__ = ["PageReader", "WebSearchRuntime", "WebSearchSession", "web_search_runtime"]

log = logging.getLogger("stack")

# search_context_size: how many pages the model reads, and how much of each.
CONTEXT_SIZES = {"low": (3, 600), "medium": (5, 1200), "high": (8, 2400)}
MAX_DOMAINS = 100
_FIELDS = frozenset({"type", "filters", "search_context_size", "user_location", "external_web_access", "search_content_types"})
_LOCATION_FIELDS = ("city", "country", "region", "timezone")
_PARAMETERS = {
    "type": "object",
    "properties": {"query": {"type": "string", "description": "What to search the web for."}},
    "required": ["query"],
}
_DESCRIPTION = ("Search the web for current information. Use it for questions about recent events or facts you are not sure of; "
                "cite the pages you use by their number.")


_URL_PARAMETERS = {"type": "object", "properties": {"url": {"type": "string", "description": "The page's URL (http or https)."}},
                   "required": ["url"]}
_FIND_PARAMETERS = {"type": "object", "properties": {"url": {"type": "string", "description": "The page's URL (http or https)."},
                                                     "pattern": {"type": "string", "description": "The text to look for."}},
                    "required": ["url", "pattern"]}
FIND_MATCHES, FIND_CONTEXT = 5, 300


class PageReader:
    """Fetches a page for `open_page` and `find_in_page`: HTML or text, at most `max_bytes`, every
    address dialled (redirects included) checked against the policy."""

    def __init__(self, client: httpx2.AsyncClient, policy: AddressPolicy, max_bytes: int) -> None:
        self.client = client
        self.policy = policy
        self.max_bytes = max_bytes

    async def read(self, url: str) -> tuple[str, str]:
        """The page's title and text; raises (any exception) when it cannot be read."""
        await self.policy.check_url(url, "url")
        async with self.client.stream("GET", url) as response:
            if response.status_code >= 400:
                raise RuntimeError(f"the page answered {response.status_code}")
            kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
            if kind and not (kind.startswith("text/") or kind in ("application/xhtml+xml", "application/json")):
                raise RuntimeError(f"the page is {kind}, not text")
            body = bytearray()
            async for piece in response.aiter_bytes():
                body += piece
                if len(body) > self.max_bytes:
                    break
            text = bytes(body[:self.max_bytes]).decode(response.encoding or "utf-8", errors="replace")
        if kind in ("text/html", "application/xhtml+xml") or text.lstrip()[:15].lower().startswith(("<!doctype html", "<html")):
            found = re.search(r"<title[^>]*>(.*?)</title>", text, re.IGNORECASE | re.DOTALL)
            return (_plain(found.group(1)) if found else url), html_text(text)
        return url, text


def web_search_runtime(backend: SearchBackend, timeout_s: float, reader: PageReader | None = None) -> WebSearchRuntime:
    """The tool_runtime provider's implementation over a backend (and a page reader, for open_page and find_in_page)."""
    return WebSearchRuntime(backend, timeout_s, reader)


class WebSearchRuntime:
    """Implements contract.tool_runtime.protocol.ToolRuntime for web search tools."""

    tool_types = WEB_SEARCH_TYPES
    item_types = frozenset({"web_search_call"})

    def __init__(self, backend: SearchBackend, timeout_s: float, reader: PageReader | None = None) -> None:
        self.backend = backend
        self.timeout_s = timeout_s
        self.reader = reader

    async def check_tool(self, tool: Mapping[str, Any], param: str) -> None:
        for key in tool:
            if key not in _FIELDS:
                raise _invalid(f"Unknown parameter: '{param}.{key}'.", f"{param}.{key}", "unknown_parameter")
        filters = tool.get("filters")
        if filters is not None:
            if not isinstance(filters, Mapping) or any(key != "allowed_domains" for key in filters):
                raise _invalid(f"Invalid '{param}.filters': expected an object with 'allowed_domains'.", f"{param}.filters")
            domains = filters.get("allowed_domains")
            if domains is not None and (not isinstance(domains, list) or len(domains) > MAX_DOMAINS
                                        or not all(isinstance(d, str) and d.strip() and "/" not in d.strip("/") for d in domains)):
                raise _invalid(f"Invalid '{param}.filters.allowed_domains': expected up to {MAX_DOMAINS} domain names "
                               "(like 'example.com', without a scheme or path).", f"{param}.filters.allowed_domains")
        size = tool.get("search_context_size")
        if size is not None and size not in CONTEXT_SIZES:
            raise _invalid(f"Invalid value for '{param}.search_context_size': expected 'low', 'medium' or 'high'.",
                           f"{param}.search_context_size")
        location = tool.get("user_location")
        if location is not None:
            if not isinstance(location, Mapping) or location.get("type", "approximate") != "approximate" \
                    or any(key not in ("type", *_LOCATION_FIELDS) for key in location):
                raise _invalid(f"Invalid '{param}.user_location': expected {{type: 'approximate', city, country, region, timezone}}.",
                               f"{param}.user_location")
            for key in _LOCATION_FIELDS:
                value = location.get(key)
                if value is not None and (not isinstance(value, str) or len(value) > 200):
                    raise _invalid(f"Invalid type for '{param}.user_location.{key}': expected a string.", f"{param}.user_location.{key}",
                                   "invalid_type")
            country = location.get("country")
            if country is not None and not (len(country) == 2 and country.isalpha()):
                raise _invalid(f"Invalid '{param}.user_location.country': expected a two-letter ISO country code.",
                               f"{param}.user_location.country")

    def public_tool(self, tool: Mapping[str, Any]) -> PublicTool:
        location = tool.get("user_location")
        public: dict[str, Any] = {"type": tool["type"], "search_context_size": tool.get("search_context_size") or "medium",
                                  "user_location": ({"type": "approximate", **{key: location.get(key) for key in _LOCATION_FIELDS}}
                                                    if isinstance(location, Mapping) else None)}
        if not str(tool["type"]).startswith("web_search_preview"):
            public["filters"] = tool.get("filters")
        return PublicTool(public)

    def render(self, item: Mapping[str, Any]) -> ToolExchange | None:
        found = item.get("action")
        action: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
        if action.get("type") in ("open_page", "find_in_page"):
            return _render_page(item, action)
        arguments = json.dumps({"query": str(action.get("query") or "")})
        if item.get("status") != "completed":
            return ToolExchange(str(item.get("id")), "web_search", arguments, "The search failed; no results.")
        sources = action.get("sources")
        if not isinstance(sources, list):  # a client's replayed item may carry anything here
            return ToolExchange(str(item.get("id")), "web_search", arguments, "(The results of this search were not kept.)")
        return ToolExchange(str(item.get("id")), "web_search", arguments,
                            numbered_sources(_sources([source for source in sources if isinstance(source, Mapping)]), _render_source))

    async def open_session(self, tools: Sequence[Mapping[str, Any]], context: ToolContext) -> WebSearchSession:
        return WebSearchSession(self.backend, self.timeout_s, tools[0], self.reader)


class WebSearchSession:
    """Implements contract.tool_runtime.protocol.ToolSession for a request's web search tool."""

    def __init__(self, backend: SearchBackend, timeout_s: float, tool: Mapping[str, Any], reader: PageReader | None = None) -> None:
        self.backend = backend
        self.timeout_s = timeout_s
        self.reader = reader
        # What the tool's entry asks for, read once: how many pages and how much of each, from where.
        self.count, self.length = CONTEXT_SIZES[tool.get("search_context_size") or "medium"]
        self.domains = tuple(d.strip().strip("/").lower() for d in ((tool.get("filters") or {}).get("allowed_domains") or ()))
        self.location: Mapping[str, Any] = tool.get("user_location") or {}
        self._latest: list[Source] = []
        self._pages: dict[str, tuple[str, str]] = {}

    def preparations(self) -> Sequence[Step]:
        return ()

    def functions(self) -> Sequence[FunctionSpec]:
        search = FunctionSpec("web_search", _PARAMETERS, _DESCRIPTION, group="web_search")
        if self.reader is None:
            return [search]
        return [search,
                FunctionSpec("open_page", _URL_PARAMETERS, "Read a web page (one the search found, or another URL); cite it by its "
                             "number.", group="web_search"),
                FunctionSpec("find_in_page", _FIND_PARAMETERS, "Find a text in a web page and read the passages around it.",
                             group="web_search")]

    def pending_calls(self) -> Sequence[ModelCall]:
        return ()

    def approval_item(self, call: ModelCall) -> dict[str, Any] | None:
        return None

    async def run(self, call: ModelCall, sink: ItemSink) -> None:
        if call.name in ("open_page", "find_in_page"):
            await self._read_page(call, sink)
            return
        query = _query(call.arguments)
        action: dict[str, Any] = {"type": "search", "query": query, "queries": [query] if query else [], "sources": None}
        item = sink.open({"id": new_id("ws"), "type": "web_search_call", "status": "in_progress", "action": action})
        item.emit("response.web_search_call.in_progress")
        if not query:
            item.item["status"] = "failed"
            return
        item.item["status"] = "searching"
        item.emit("response.web_search_call.searching")
        location = self.location
        web_query = WebQuery(query, self.count, self.domains, location.get("country"), location.get("region"), location.get("city"),
                             location.get("timezone"))
        try:
            pages = await asyncio.wait_for(self.backend.search(web_query), self.timeout_s)
        except Exception as error:  # the engine's failure is the call's, never the response's
            log.warning("web search for %r failed: %s", query[:80], _describe(error))
            item.item["status"] = "failed"
            return
        kept = [page for page in pages if page.url.startswith(("http://", "https://")) and domain_allowed(page.url, self.domains)]
        action["sources"] = [{"type": "url", "url": page.url, "title": page.title, "text": page.text[:self.length]}
                             for page in kept[:self.count]]
        item.item["status"] = "completed"
        self._latest = _sources(action["sources"])
        item.emit("response.web_search_call.completed")

    async def _read_page(self, call: ModelCall, sink: ItemSink) -> None:
        arguments = _arguments(call.arguments)
        url = str(arguments.get("url") or "").strip()
        action: dict[str, Any] = {"type": call.name, "url": url}
        pattern = str(arguments.get("pattern") or "").strip()
        if call.name == "find_in_page":
            action["pattern"] = pattern
        item = sink.open({"id": new_id("ws"), "type": "web_search_call", "status": "in_progress", "action": action})
        item.emit("response.web_search_call.in_progress")
        if self.reader is None or not url or not domain_allowed(url, self.domains) or (call.name == "find_in_page" and not pattern):
            item.item["status"] = "failed"
            return
        item.item["status"] = "searching"
        item.emit("response.web_search_call.searching")
        try:
            if url not in self._pages:
                self._pages[url] = await asyncio.wait_for(self.reader.read(url), self.timeout_s)
            title, text = self._pages[url]
        except Exception as error:  # the page's failure is the call's, never the response's
            log.warning("opening %s failed: %s", url[:200], _describe(error))
            item.item["status"] = "failed"
            return
        read = text[:self.length * 4] if call.name == "open_page" else _passages(text, pattern)
        action["text"] = read  # for the model alone (contract.items.INCLUDED_ONLY never shows it)
        action["title"] = title
        item.item["status"] = "completed"
        self._latest = [Source({"type": "url_citation", "url": url, "title": title}, read)]
        item.emit("response.web_search_call.completed")

    def citations(self) -> MarkerCitations | None:
        """The answer cites the latest search's pages, by the numbers the model read them under."""
        return MarkerCitations(self._latest) if self._latest else None

    async def aclose(self) -> None:
        return None


def _invalid(message: str, param: str, code: str = "invalid_value") -> InvalidRequestError:
    return InvalidRequestError(message, param=param, code=code)


def _describe(error: BaseException) -> str:
    return "timed out" if isinstance(error, TimeoutError) else f"{type(error).__name__}: {str(error)[:200]}"


def _arguments(arguments: str) -> dict[str, Any]:
    try:
        parsed = json.loads(arguments or "{}")
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _passages(text: str, pattern: str) -> str:
    """The passages around the first matches of `pattern` (case ignored), or a note that there are none."""
    lowered, needle = text.lower(), pattern.lower()
    passages: list[str] = []
    start = lowered.find(needle)
    while start >= 0 and len(passages) < FIND_MATCHES:
        passages.append(" ".join(text[max(0, start - FIND_CONTEXT // 2):start + len(pattern) + FIND_CONTEXT // 2].split()))
        start = lowered.find(needle, start + len(needle))
    return "\n...\n".join(passages) if passages else f"'{pattern}' does not occur in the page."


def _render_page(item: Mapping[str, Any], action: Mapping[str, Any]) -> ToolExchange:
    name = str(action.get("type"))
    arguments = {"url": str(action.get("url") or "")}
    if name == "find_in_page":
        arguments["pattern"] = str(action.get("pattern") or "")
    if item.get("status") != "completed":
        output = "The page could not be read."
    elif action.get("text") is None:
        output = "(What was read of this page was not kept.)"
    else:
        output = numbered_sources([Source({"url": arguments["url"], "title": str(action.get("title") or arguments["url"])},
                                          str(action["text"]))], _render_source)
    return ToolExchange(str(item.get("id")), name, json.dumps(arguments), output)


def _query(arguments: str) -> str:
    parsed = _arguments(arguments)
    raw = parsed.get("query", parsed.get("queries"))
    if isinstance(raw, list):
        raw = next((q for q in raw if isinstance(q, str) and q.strip()), None)
    return raw.strip()[:1000] if isinstance(raw, str) else ""


def _sources(sources: Sequence[Mapping[str, Any]]) -> list[Source]:
    return [Source({"type": "url_citation", "url": str(source.get("url")), "title": str(source.get("title") or source.get("url"))},
                   str(source.get("text") or "")) for source in sources if source.get("url")]


def _render_source(number: int, source: Source) -> str:
    return f"[{number}] {source.annotation.get('title')} ({source.annotation.get('url')})\n{source.text}"


def page(url: str, title: Any, text: Any) -> WebPage:
    """A result as backends give it: HTML tags (Brave's highlighting) and surrounding space removed."""
    return WebPage(url, _plain(title) or url, _plain(text))


def _plain(value: Any) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]{0,200}>", "", str(value or ""))).split())
