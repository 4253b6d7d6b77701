"""What the API surfaces' routes share: `include` read from a query, a JSON answer serialised once,
a call cancelled when its client leaves, and the OpenAPI declaration of a body the route reads itself.
(The checks of request values every API applies are the contract's: `contract.checks`.)"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, TypeVar
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import Response

from contract import fastjson
from contract.items import ItemText, check_include
from runtime.http.departure import on_departure

__all__ = ["METADATA_SCHEMA", "JSONBytes", "attachment", "include_query", "json_body", "unless_disconnected"]

T = TypeVar("T")


def include_query(request: Request) -> frozenset[str]:
    """`include` of a GET, as the SDK sends it (`include[]=a&include[]=b`) or plain, checked."""
    return check_include([*request.query_params.getlist("include[]"), *request.query_params.getlist("include")])


class JSONBytes(Response):
    """A JSON response serialised once with the stdlib encoder. Routes return it instead of a
    dict, which FastAPI would first walk with `jsonable_encoder` (slow on long item lists).

    A list page's `data` may hold `ItemText`s: their texts go in as they are."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        data = content.get("data") if content.__class__ is dict else None
        if data.__class__ is list and any(item.__class__ is ItemText for item in data):
            return _page_json(content, data)
        return fastjson.dumps(content)


def _page_json(page: dict[str, Any], data: list[Any]) -> bytes:
    items = ",".join(item.text if item.__class__ is ItemText else fastjson.dumps(item).decode() for item in data)
    fields = [fastjson.dumps(key) + b":" + (b"[" + items.encode() + b"]" if key == "data" else fastjson.dumps(value))
              for key, value in page.items()]
    return b"{" + b",".join(fields) + b"}"


async def unless_disconnected(request: Request, work: Awaitable[T]) -> T | None:
    """Await `work`, cancelling it if the client goes away first (the upstream call with it);
    None when the client went away."""
    current = asyncio.current_task()
    gone = False

    def leave() -> None:
        nonlocal gone
        gone = True
        if current is not None:
            current.cancel()

    forget = on_departure(request.scope, request.receive, leave)
    try:
        return await work
    except asyncio.CancelledError:
        if not gone or current is None:
            raise
        current.uncancel()
        return None
    finally:
        forget()


METADATA_SCHEMA: dict[str, Any] = {"type": ["object", "null"], "maxProperties": 16, "propertyNames": {"maxLength": 64},
                                   "additionalProperties": {"type": "string", "maxLength": 512}}
"""`contract.checks.validate_metadata`'s rules: at most 16 string pairs, keys up to 64 characters, values up to 512."""


def json_body(required: list[str], properties: dict[str, Any], *, more: bool = True, optional: bool = False,
              rules: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A route's `openapi_extra` declaring its JSON body, for routes that read the bytes themselves
    (to pass fields on untouched, or to stay fast) or whose checks say more than their model: the
    document still says what a request looks like and what the route checks, and replaces FastAPI's
    schema of a body model (runtime.app.openapi). `more`: other fields are allowed (passed on, or
    ignored); `optional`: no body at all is fine; `rules`: the checks that tie fields together
    (JSON Schema's `if`/`then`, `not`, `anyOf`), all of which must hold."""
    schema: dict[str, Any] = {"type": "object", "required": required, "properties": properties, "additionalProperties": more}
    if not required:
        del schema["required"]
    if rules:
        schema["allOf"] = rules
    return {"requestBody": {"required": not optional, "content": {"application/json": {"schema": schema}}}}


def attachment(filename: str) -> str:
    """The content-disposition of a download named `filename` (any characters: RFC 5987's UTF-8 form)."""
    return f"attachment; filename*=UTF-8''{quote(filename)}"
