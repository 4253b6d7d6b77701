"""Fake search engines that speak Tavily's, Brave's and SearXNG's HTTP APIs over a small fixed
corpus, for the web_search tool's tests: served on 127.0.0.1 by uvicorn in a thread.

A query containing `[fail]` is answered with a 500, `[slow:MS]` after MS milliseconds; every
request is recorded (method, path, query, body, headers)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from fake_upstream.server import bind_socket, serving

__all__ = ["CORPUS", "FakeSearch", "running_fake_search"]

CORPUS = (
    ("https://www.lighthouses.example.com/fog", "Fog signals", "In fog the keeper sounds the <strong>horn</strong> twice a minute."),
    ("https://tides.example.org/harbour", "Harbour tide tables", "High water at the harbour is at 06:12 and 18:40 today."),
    ("https://news.example.net/storm", "Storm warning", "A storm is expected on the coast tonight; boats should stay moored."),
)


@dataclass
class FakeSearch:
    engine: str
    base_url: str
    requests: list[dict[str, Any]] = field(default_factory=list)


def _matches(query: str) -> list[tuple[str, str, str]]:
    words = {word for word in re.findall(r"\w+", query.lower()) if len(word) > 2 and word != "site"}
    sites = re.findall(r"site:([\w.-]+)", query)
    found = [page for page in CORPUS if words & set(re.findall(r"\w+", (page[1] + " " + page[2]).lower()))]
    if sites:
        found = [page for page in found if any(page[0].split("/")[2].endswith(site) for site in sites)]
    return found


async def _directives(query: str) -> JSONResponse | None:
    slow = re.search(r"\[slow:(\d+)\]", query)
    if slow:
        await asyncio.sleep(int(slow.group(1)) / 1000)
    if "[fail]" in query:
        return JSONResponse({"detail": "the engine failed"}, status_code=500)
    return None


def _app(engine: str, key: str | None, record: list[dict[str, Any]]) -> Starlette:
    async def remember(request: Request) -> dict[str, Any]:
        body = await request.json() if request.method == "POST" else None
        entry = {"method": request.method, "path": request.url.path, "params": dict(request.query_params), "body": body,
                 "headers": dict(request.headers)}
        record.append(entry)
        return entry

    async def tavily(request: Request) -> JSONResponse:
        entry = await remember(request)
        if request.headers.get("authorization") != f"Bearer {key}":
            return JSONResponse({"detail": {"error": "Unauthorized: missing or invalid API key."}}, status_code=401)
        body = entry["body"] or {}
        query = str(body.get("query", ""))
        failed = await _directives(query)
        if failed:
            return failed
        pages = [p for p in _matches(query) if not body.get("include_domains")
                 or any(p[0].split("/")[2].endswith(d) for d in body["include_domains"])]
        return JSONResponse({"query": query, "results": [{"title": t, "url": u, "content": c, "score": 0.9} for u, t, c in pages][
            : int(body.get("max_results", 5))], "response_time": 0.01})

    async def brave(request: Request) -> JSONResponse:
        entry = await remember(request)
        if request.headers.get("x-subscription-token") != key:
            return JSONResponse({"type": "ErrorResponse", "error": {"code": "SUBSCRIPTION_TOKEN_INVALID"}}, status_code=422)
        query = entry["params"].get("q", "")
        failed = await _directives(query)
        if failed:
            return failed
        results = [{"title": t, "url": u, "description": c, "type": "search_result"} for u, t, c in _matches(query)]
        return JSONResponse({"type": "search", "query": {"original": query}, "web": {"type": "search",
                                                                                    "results": results[: int(entry["params"].get("count", 20))]}})

    async def searxng(request: Request) -> JSONResponse:
        entry = await remember(request)
        if entry["params"].get("format") != "json":
            return JSONResponse({"detail": "format not allowed"}, status_code=403)
        query = entry["params"].get("q", "")
        failed = await _directives(query)
        if failed:
            return failed
        results = [{"title": t, "url": u, "content": c, "engine": "fake", "score": 1.0} for u, t, c in _matches(query)]
        return JSONResponse({"query": query, "number_of_results": len(results), "results": results})

    routes = {"tavily": [Route("/search", tavily, methods=["POST"])], "brave": [Route("/res/v1/web/search", brave)],
              "searxng": [Route("/search", searxng)]}[engine]
    return Starlette(routes=routes)


@contextmanager
def running_fake_search(engine: str, key: str | None = "test-key") -> Iterator[FakeSearch]:
    """Serve the fake `engine` (tavily, brave or searxng) on a free port until the block ends."""
    sock = bind_socket("127.0.0.1", 0)
    port = sock.getsockname()[1]
    base = f"http://127.0.0.1:{port}" + ("/res/v1" if engine == "brave" else "")
    fake = FakeSearch(engine, base)
    with serving(_app(engine, key, fake.requests), sock, f"fake-{engine}"):
        yield fake


FOG_PAGE = """<!doctype html><html><head><title>Fog signals</title><script>var horn = "not text";</script>
<style>p { color: grey }</style></head><body><h1>Fog signals</h1>
<p>In fog the keeper sounds the horn twice a minute until the fog lifts.</p>
<p>The bell is rung when the horn fails.</p></body></html>"""


@contextmanager
def running_fake_pages() -> Iterator[str]:
    """A web server of a few pages for open_page and find_in_page; yields its base URL."""
    from starlette.responses import Response

    async def fog(request: Request) -> Response:
        return Response(FOG_PAGE, media_type="text/html; charset=utf-8")

    async def image(request: Request) -> Response:
        return Response(b"\x89PNG\r\n\x1a\n" + bytes(32), media_type="image/png")

    sock = bind_socket("127.0.0.1", 0)
    app = Starlette(routes=[Route("/pages/fog.html", fog), Route("/pages/image.png", image)])
    with serving(app, sock, "fake-pages"):
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
