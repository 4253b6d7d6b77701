"""Request checks and shapes shared by the API surfaces."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Mapping, Sequence
from typing import Any, TypeVar

from starlette.requests import Request
from starlette.responses import Response

from runtime import fastjson
from runtime.apis.items import ItemText, check_include
from runtime.departure import on_departure
from runtime.errors import JSON_INVALID_MESSAGE, InvalidRequestError

__all__ = ["MAX_STRING", "JSONBytes", "include_query", "cursor_page", "parse_json_object", "unless_disconnected", "validate_id", "validate_limit", "validate_metadata",
           "validate_order"]

T = TypeVar("T")

MAX_STRING = 10_485_760
"""OpenAI's limit on one string of input, in characters (Responses' `input`, a chat message's content)."""
MAX_METADATA_PAIRS = 16
MAX_METADATA_KEY = 64
MAX_METADATA_VALUE = 512


def parse_json_object(raw: bytes) -> dict[str, Any]:
    """The request body as a JSON object, or a 400 saying what is wrong with it."""
    try:
        body = fastjson.loads(raw)
    except ValueError:
        raise InvalidRequestError(JSON_INVALID_MESSAGE, code="invalid_json") from None
    if not isinstance(body, dict):
        raise InvalidRequestError(f"The request body must be a JSON object, not {type(body).__name__}.", code="invalid_json")
    return body


def validate_metadata(metadata: Any, param: str = "metadata") -> dict[str, str] | None:
    """OpenAI's metadata rules: at most 16 string pairs, keys <= 64 chars, values <= 512."""
    if metadata is None:
        return None
    if not isinstance(metadata, Mapping):
        raise InvalidRequestError(f"Invalid type for '{param}': expected an object of string pairs.", param=param, code="invalid_type")
    if len(metadata) > MAX_METADATA_PAIRS:
        raise InvalidRequestError(
            f"Invalid '{param}': at most {MAX_METADATA_PAIRS} pairs are allowed, got {len(metadata)}.", param=param, code="invalid_value"
        )
    for key, value in metadata.items():
        if not isinstance(key, str) or len(key) > MAX_METADATA_KEY:
            raise InvalidRequestError(
                f"Invalid '{param}': keys must be strings of at most {MAX_METADATA_KEY} characters ({str(key)[:80]!r}).",
                param=f"{param}.{key}", code="invalid_value",
            )
        if not isinstance(value, str) or len(value) > MAX_METADATA_VALUE:
            raise InvalidRequestError(
                f"Invalid '{param}.{key}': values must be strings of at most {MAX_METADATA_VALUE} characters.",
                param=f"{param}.{key}", code="invalid_value",
            )
    return dict(metadata)


def include_query(request: Request) -> frozenset[str]:
    """`include` of a GET, as the SDK sends it (`include[]=a&include[]=b`) or plain, checked."""
    return check_include([*request.query_params.getlist("include[]"), *request.query_params.getlist("include")])


def validate_id(value: str | None, param: str, prefix: str) -> None:
    """As OpenAI does: an id of the wrong kind (`resp_...` for a response, `conv_...` for a
    conversation) is a malformed request, a 400, not a missing object."""
    if value is not None and not value.startswith(prefix):
        raise InvalidRequestError(f"Invalid '{param}': '{value[:80]}'. Expected an ID that begins with '{prefix}'.", param=param, code="invalid_value")


def validate_limit(limit: int, maximum: int = 100) -> int:
    if not 1 <= limit <= maximum:
        raise InvalidRequestError(f"Invalid 'limit': must be between 1 and {maximum}, got {limit}.", param="limit", code="invalid_value")
    return limit


def validate_order(order: str) -> str:
    if order not in ("asc", "desc"):
        raise InvalidRequestError(f"Invalid 'order': expected 'asc' or 'desc', got {order!r}.", param="order", code="invalid_value")
    return order


def cursor_page(data: Sequence[Mapping[str, Any] | ItemText], has_more: bool) -> dict[str, Any]:
    """The list shape the SDK's cursor paginators read: they continue `after` the last id."""
    return {
        "object": "list",
        "data": list(data),
        "first_id": _id_of(data[0]) if data else None,
        "last_id": _id_of(data[-1]) if data else None,
        "has_more": has_more,
    }


def _id_of(item: Any) -> Any:
    return item.id if item.__class__ is ItemText else item["id"]


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


METADATA_SCHEMA: dict[str, Any] = {"type": ["object", "null"], "maxProperties": 16,
                                   "additionalProperties": {"type": "string", "maxLength": 512}}


def json_body(required: list[str], properties: dict[str, Any], *, more: bool = True, optional: bool = False) -> dict[str, Any]:
    """A route's `openapi_extra` declaring its JSON body, for routes that read the bytes themselves
    (to pass fields on untouched, or to stay fast): the document still says what a request looks
    like and what the route checks. `more`: other fields are allowed (passed on, or ignored); `optional`: no body at all is fine."""
    schema = {"type": "object", "required": required, "properties": properties, "additionalProperties": more}
    if not required:
        del schema["required"]
    return {"requestBody": {"required": not optional, "content": {"application/json": {"schema": schema}}}}

