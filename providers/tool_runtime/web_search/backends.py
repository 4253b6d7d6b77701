"""Search engines behind the `web_search` tool, one tool_runtime provider each: Tavily and Brave
(hosted, with a key), SearXNG (self-hosted, no key). Each speaks its engine's own HTTP API."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

import httpx2
from pydantic import BaseModel, ConfigDict, Field

from contract.spec import Api, ProviderContext, ProviderSpec
from providers.tool_runtime.web_search import PageReader, WebSearchRuntime, page, web_search_runtime
from contract.tool_runtime.web_search import WebPage, WebQuery
from runtime.security.netguard import AddressPolicy

__all__ = ["BRAVE", "SEARXNG", "TAVILY", "BraveBackend", "SearxngBackend", "TavilyBackend"]


class _Config(BaseModel):
    model_config = ConfigDict(extra="forbid")

    timeout_s: float = Field(default=15.0, gt=0, description="How long a search (or reading a page) may take before its call fails")
    read_pages: bool = Field(default=True, description="Offer the model open_page and find_in_page (the server fetches the pages)")
    allow_private: list[str] = Field(default_factory=list, description=(
        "Non-public hosts or networks (names, addresses, CIDR) pages may be read from; public addresses are always allowed"))
    max_page_bytes: int = Field(default=2_097_152, ge=1024, description="The most of a page that is read")


class TavilyConfig(_Config):
    api_key: str = Field(min_length=1, description="The Tavily API key (tvly-...)")
    base_url: str = Field(default="https://api.tavily.com", min_length=1)
    search_depth: str = Field(default="basic", pattern="^(basic|advanced)$", description="`advanced` costs two credits a search")


class BraveConfig(_Config):
    api_key: str = Field(min_length=1, description="The Brave Search API subscription token")
    base_url: str = Field(default="https://api.search.brave.com/res/v1", min_length=1)


class SearxngConfig(_Config):
    base_url: str = Field(min_length=1, description="The SearXNG instance, e.g. http://127.0.0.1:8888 (its `json` format enabled)")


def _json(response: httpx2.Response, engine: str) -> Any:
    if response.status_code >= 400:
        raise RuntimeError(f"{engine} answered {response.status_code}: {response.text[:200]}")
    try:
        return response.json()
    except ValueError:
        raise RuntimeError(f"{engine} answered with a body that is not JSON") from None


def _site_query(query: WebQuery) -> str:
    """The query with `site:` operators for the allowed domains (engines without a domain filter of their own)."""
    if not query.allowed_domains:
        return query.query
    sites = " OR ".join(f"site:{domain}" for domain in query.allowed_domains)
    return f"{query.query} ({sites})" if len(query.allowed_domains) > 1 else f"{query.query} {sites}"


class TavilyBackend:
    """POST /search (https://docs.tavily.com): the key as a bearer token, domains as `include_domains`."""

    def __init__(self, client: httpx2.AsyncClient, search_depth: str) -> None:
        self.client = client
        self.search_depth = search_depth

    async def search(self, query: WebQuery) -> Sequence[WebPage]:
        body: dict[str, Any] = {"query": query.query, "max_results": query.max_results, "search_depth": self.search_depth}
        if query.allowed_domains:
            body["include_domains"] = list(query.allowed_domains)
        data = _json(await self.client.post("/search", json=body), "Tavily")
        return [page(str(r["url"]), r.get("title"), r.get("content")) for r in data.get("results") or () if r.get("url")]


class BraveBackend:
    """GET /web/search (https://api-dashboard.search.brave.com/app/documentation): the key in
    `X-Subscription-Token`, the user's country as `country`."""

    def __init__(self, client: httpx2.AsyncClient) -> None:
        self.client = client

    async def search(self, query: WebQuery) -> Sequence[WebPage]:
        params: dict[str, Any] = {"q": _site_query(query), "count": query.max_results}
        if query.country:
            params["country"] = query.country.upper()
        data = _json(await self.client.get("/web/search", params=params), "Brave Search")
        results = (data.get("web") or {}).get("results") or ()
        return [page(str(r["url"]), r.get("title"), r.get("description")) for r in results if r.get("url")]


class SearxngBackend:
    """GET /search?format=json (https://docs.searxng.org/dev/search_api.html)."""

    def __init__(self, client: httpx2.AsyncClient) -> None:
        self.client = client

    async def search(self, query: WebQuery) -> Sequence[WebPage]:
        params: dict[str, Any] = {"q": _site_query(query), "format": "json"}
        data = _json(await self.client.get("/search", params=params), "SearXNG")
        return [page(str(r["url"]), r.get("title"), r.get("content")) for r in data.get("results") or () if r.get("url")]


@contextlib.asynccontextmanager
async def _reader(context: ProviderContext[Any]) -> AsyncIterator[PageReader | None]:
    config = context.config
    if not config.read_pages:
        yield None
        return
    policy = AddressPolicy(config.allow_private)
    transport = context.http_transport(max_connections=32, address_guard=policy.allows)
    async with httpx2.AsyncClient(transport=transport, timeout=config.timeout_s, follow_redirects=True, max_redirects=5,
                                  headers={"User-Agent": "stack-web-search/1"}) as client:
        yield PageReader(client, policy, config.max_page_bytes)


@contextlib.asynccontextmanager
async def _tavily(context: ProviderContext[TavilyConfig]) -> AsyncIterator[WebSearchRuntime]:
    config = context.config
    async with context.http_client(base_url=config.base_url, timeout=config.timeout_s,
                                   headers={"Authorization": f"Bearer {config.api_key}"}) as client:
        async with _reader(context) as reader:
            yield web_search_runtime(TavilyBackend(client, config.search_depth), config.timeout_s, reader)


@contextlib.asynccontextmanager
async def _brave(context: ProviderContext[BraveConfig]) -> AsyncIterator[WebSearchRuntime]:
    config = context.config
    async with context.http_client(base_url=config.base_url, timeout=config.timeout_s,
                                   headers={"X-Subscription-Token": config.api_key, "Accept": "application/json"}) as client:
        async with _reader(context) as reader:
            yield web_search_runtime(BraveBackend(client), config.timeout_s, reader)


@contextlib.asynccontextmanager
async def _searxng(context: ProviderContext[SearxngConfig]) -> AsyncIterator[WebSearchRuntime]:
    config = context.config
    async with context.http_client(base_url=config.base_url, timeout=config.timeout_s, headers={"Accept": "application/json"}) as client:
        async with _reader(context) as reader:
            yield web_search_runtime(SearxngBackend(client), config.timeout_s, reader)


TAVILY = ProviderSpec(api=Api.tool_runtime, name="tavily", config_model=TavilyConfig, factory=_tavily,
                      description="The web_search tool through Tavily's search API (a key from tavily.com)",
                      sample_config={"api_key": "${env.TAVILY_API_KEY}"})
BRAVE = ProviderSpec(api=Api.tool_runtime, name="brave", config_model=BraveConfig, factory=_brave,
                     description="The web_search tool through the Brave Search API (a subscription token)",
                     sample_config={"api_key": "${env.BRAVE_API_KEY}"})
SEARXNG = ProviderSpec(api=Api.tool_runtime, name="searxng", config_model=SearxngConfig, factory=_searxng,
                       description="The web_search tool through a self-hosted SearXNG instance (no key; its json format enabled)",
                       sample_config={"base_url": "${env.SEARXNG_URL}"})
