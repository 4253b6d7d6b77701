"""Checks every API applies to request values, in OpenAI's words (a 400 naming the parameter), and the
list page its cursor paginators read."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from contract import fastjson
from contract.errors import JSON_INVALID_MESSAGE, InvalidRequestError
from contract.items import ItemText

__all__ = ["MAX_STRING", "cursor_page", "parse_json_object", "validate_id", "validate_limit", "validate_metadata", "validate_order"]

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
