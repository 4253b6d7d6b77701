"""The playground: a Responses conversation with any listed model, streamed token by token. The
page's script posts each turn to `/console/api/responses` (with the CSRF token in a header), which
sends it to `POST /v1/responses` as the signed-in principal and passes its events on as they come.

Its tool forms offer what this server can run (`tool_options`): function tools always (the client
runs them), and `mcp`, `file_search`, `web_search` and `code_interpreter` when `GET /v1/providers` lists an active
tool_runtime provider of that kind, with the MCP servers and connectors run.yaml configures and the
principal's own vector stores to choose from. The script builds the request's `tools` from the forms,
then adds those of the raw JSON box (any other tool, or fields the forms lack)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from starlette.responses import PlainTextResponse, Response, StreamingResponse

from runtime.console.page import SECURITY_HEADERS, Page

__all__ = ["ROUTES", "WEB_SEARCH_BACKENDS", "ToolOptions", "tool_options"]

_TURN_FIELDS = {"model", "input", "instructions", "temperature", "max_output_tokens", "reasoning", "previous_response_id", "tools",
                "store", "conversation", "include"}

WEB_SEARCH_BACKENDS = frozenset({"tavily", "brave", "searxng"})
"""The tool_runtime provider types that serve `web_search` (providers/tool_runtime/web_search/backends.py;
a unit test keeps this in step with pyproject's entry points). /v1/providers names a provider's type,
not the tool types it serves, and the console may not import providers (they sit above it)."""

STORES_LISTED = 100
"""The most vector stores the file_search form lists (the API's largest page): the newest first."""


@dataclass(frozen=True)
class ToolOptions:
    """What the playground's tool forms offer. `known` is False when /v1/providers did not answer:
    every form is then offered, with a note that the server may refuse some."""

    known: bool
    mcp: bool
    file_search: bool
    web_search: bool
    code_interpreter: bool = False
    servers: tuple[str, ...] = ()
    """The MCP servers run.yaml configures, by `server_label` (a request names them without a URL)."""
    connectors: tuple[str, ...] = ()
    """The `connector_id`s of those servers."""
    stores: tuple[tuple[str, str], ...] = ()
    """The principal's vector stores: (id, what to show: its name and id)."""


def tool_options(providers: Any, stores: Any) -> ToolOptions:
    """The options from the answers of `GET /v1/providers` and `GET /v1/vector_stores` (None, or any
    other shape, when one was refused)."""
    listed = _data(stores)
    choices = tuple((str(store["id"]), f"{store.get('name') or 'unnamed'} ({store['id']})")
                    for store in listed if isinstance(store.get("id"), str))
    rows = _data(providers)
    if not rows:
        return ToolOptions(known=False, mcp=True, file_search=True, web_search=True, code_interpreter=True, stores=choices)
    tools = [row for row in rows if row.get("api") == "tool_runtime" and row.get("status") == "active"]
    kinds = {row.get("provider_type") for row in tools}
    servers = [server for row in tools if row.get("provider_type") == "mcp" for server in _data((row.get("config") or {}).get("servers"))]
    return ToolOptions(
        known=True, mcp="mcp" in kinds, file_search="file_search" in kinds, web_search=bool(kinds & WEB_SEARCH_BACKENDS),
        code_interpreter="code_interpreter" in kinds,
        servers=tuple(str(server["server_label"]) for server in servers if server.get("server_label")),
        connectors=tuple(str(server["connector_id"]) for server in servers if server.get("connector_id")),
        stores=choices)


def _data(body: Any) -> list[dict[str, Any]]:
    """The objects of a list answer (`{"data": [...]}`) or of a list; nothing of any other shape."""
    rows = body.get("data") if isinstance(body, dict) else body
    return [row for row in rows if isinstance(row, dict)] if isinstance(rows, list) else []


async def playground(page: Page) -> Response:
    _, models = await page.api("GET", "/models")
    llms = [model for model in (models or {}).get("data") or [] if (model.get("custom_metadata") or {}).get("model_type") != "embedding"]
    status, providers = await page.api("GET", "/providers")
    stores_status, stores = await page.api("GET", f"/vector_stores?limit={STORES_LISTED}")
    options = tool_options(providers if status == 200 else None, stores if stores_status == 200 else None)
    return page.render("playground.html", models=llms, conversation=page.request.query_params.get("conversation", ""), tools=options)


async def turn(page: Page) -> Response:
    try:
        asked = json.loads(await page.request.body())
    except ValueError:
        return PlainTextResponse("The turn is not JSON.", 400, headers=SECURITY_HEADERS)
    if not isinstance(asked, dict):
        return PlainTextResponse("The turn is not a JSON object.", 400, headers=SECURITY_HEADERS)
    body = {key: value for key, value in asked.items() if key in _TURN_FIELDS} | {"stream": True}
    answer = await page.console.context.loopback.stream("POST", "/v1/responses", json.dumps(body).encode(), page.session.principal)
    media = answer.headers.get("content-type", "application/json")
    return StreamingResponse(answer.parts, answer.status, headers={**SECURITY_HEADERS, "x-accel-buffering": "no"}, media_type=media)


ROUTES = [("/playground", playground, ["GET"]), ("/api/responses", turn, ["POST"])]
