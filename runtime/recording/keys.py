"""The request key: canonicalising a request, hashing it, and naming its recording file."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any, Final
from urllib.parse import parse_qsl, urlencode

import httpx2

from runtime.recording._common import Json

HASH_IN_NAME: Final = 12
_SLUG_MAX: Final = 60


def request_key(method: str, path: str, body: bytes | None) -> tuple[str, dict[str, Any]]:
    """The sha256 hex digest and the canonical request it is computed over.

    `path` is the URL path, optionally with `?query`. The canonical request is
    `{"method", "path", "body"}` with the JSON body normalised, or `{"method", "path",
    "body_sha256"}` for a body that is not JSON.
    """
    canonical: dict[str, Any] = {"method": method.upper(), "path": _canonical_path(path)}
    parsed = parse_json(body) if body else None
    if body and parsed is NOT_JSON:
        canonical["body_sha256"] = hashlib.sha256(body).hexdigest()
    else:
        canonical["body"] = _normalise(parsed)
    return _digest(canonical), canonical


NOT_JSON: Final = object()


def parse_json(body: bytes) -> Json:
    try:
        return json.loads(body)
    except ValueError:  # also UnicodeDecodeError
        return NOT_JSON


def _canonical_path(path: str) -> str:
    route, _, query = path.partition("?")
    # "/v1/models/" and "/v1/models" are the same endpoint to every upstream we talk to.
    route = route.rstrip("/") or "/"
    if not query:
        return route
    return f"{route}?{urlencode(sorted(parse_qsl(query, keep_blank_values=True)))}"


def _normalise(value: Json) -> Json:
    """Round floats to 6 significant digits, so 0.7 and 0.7000000000000001 (or 1 and 1.0) agree."""
    if isinstance(value, float):
        rounded = float(f"{value:.6g}")
        return int(rounded) if rounded.is_integer() else rounded
    if isinstance(value, dict):
        return {key: _normalise(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_normalise(item) for item in value]
    return value


def _digest(canonical: Mapping[str, Any]) -> str:
    text = json.dumps(canonical, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def key_of(request: httpx2.Request) -> tuple[str, dict[str, Any]]:
    query = request.url.query.decode("ascii", "replace")
    path = f"{request.url.path}?{query}" if query else request.url.path
    return request_key(request.method, path, request.content)


def slug(canonical_path: str) -> str:
    route = canonical_path.partition("?")[0]
    return re.sub(r"[^a-z0-9]+", "-", route.lower()).strip("-")[:_SLUG_MAX].strip("-") or "root"


def file_name(key: str, canonical: Mapping[str, Any]) -> str:
    return f"{slug(canonical['path'])}-{key[:HASH_IN_NAME]}.json"

