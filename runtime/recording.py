"""Record and replay upstream HTTP traffic at the httpx2 transport seam.

Every remote provider gets its `httpx2.AsyncClient` from the stack, which builds it with
`recording_transport(inner, mode, directory)`. Recording therefore wraps the wire itself: no SDK
class is patched and nothing here knows about any provider.

Modes:
    live               the inner transport itself, untouched
    record             forward every request upstream and (over)write its recording
    replay             answer from recordings only; the upstream is never contacted
    record-if-missing  replay what is recorded, forward and record what is not

Key: sha256 over the canonical request (`request_key`): method, URL path (no scheme, host or port;
trailing slash stripped; query sorted) and body (JSON normalised, floats to 6 significant digits;
other bodies by their sha256). Headers are left out, so API keys and hosts do not matter.

One file per exchange, `<path-slug>-<hash12>.json`, in one flat directory; pretty JSON (indent 2,
sorted keys):

    {"request":  {"method": "POST", "path": "/v1/chat/completions", "body": {...}},
     "response": {"status": 200, "headers": {"content-type": "application/json"}, "body": {...}}}

The response carries exactly one of `body` (parsed JSON, for JSON content types), `text` (other
UTF-8 bodies), `body_base64` (anything else) or, for `text/event-stream`, `chunks`: each SSE event's
data string in order (`[DONE]` included), or `{"event": name, "data": ...}` for events with a name.
A stream that ended abnormally also has `stream_error`: `"<httpx2 error class>: <message>"`; replay
yields the same chunks and then raises that error (a `RemoteProtocolError` when the class is not an
httpx2 transport error). Only the content-type and retry-after* headers are kept.

A stream the caller closes before its end is recorded as far as it was read, with
`stream_error: "closed by client"`, unless `[DONE]` was already seen (SDKs stop reading there):
replaying it past that point then fails loudly instead of silently returning a truncated answer.
A non-stream body that fails or is abandoned midway is not recorded at all.
"""

from __future__ import annotations

import base64
import codecs
import contextlib
import difflib
import hashlib
import json
import os
import re
import shlex
import tempfile
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any, Final, Literal, TypeAlias, get_args
from urllib.parse import parse_qsl, urlencode

import httpx2

__all__ = [
    "DIR_ENV",
    "MODE_ENV",
    "RecordingMode",
    "RecordingTransport",
    "ReplayMissError",
    "ReplayTransport",
    "default_mode",
    "recording_transport",
    "request_key",
]

RecordingMode = Literal["live", "record", "replay", "record-if-missing"]
MODES: Final[tuple[RecordingMode, ...]] = get_args(RecordingMode)

MODE_ENV: Final = "STACK_RECORDING_MODE"
DIR_ENV: Final = "STACK_RECORDINGS_DIR"

CLOSED_BY_CLIENT: Final = "closed by client"

Json: TypeAlias = Any
Chunk: TypeAlias = str | dict[str, str]

# Response headers worth replaying: what clients act on. Dates, request ids and rate-limit
# counters would only make recordings churn.
_KEPT_HEADERS: Final = ("content-type", "retry-after", "retry-after-ms")
_HASH_IN_NAME: Final = 12
_SLUG_MAX: Final = 60
_DIFF_MAX_LINES: Final = 15
_DIFF_LINE_MAX: Final = 160
_SUMMARY_TEXT_MAX: Final = 80


# --- modes -----------------------------------------------------------------------------------


def default_mode(env: Mapping[str, str], default: RecordingMode = "live") -> RecordingMode:
    """The mode named by `STACK_RECORDING_MODE` in `env`, or `default` when unset or empty.

    Raises ValueError, listing the valid modes, for any other value.
    """
    value = env.get(MODE_ENV, "").strip()
    if not value:
        return default
    return _check_mode(value, source=MODE_ENV)


def _check_mode(value: str, source: str = "mode") -> RecordingMode:
    if value not in MODES:
        raise ValueError(f"{source}={value!r} is not a recording mode; valid modes: {', '.join(MODES)}")
    return value


def recording_transport(
    inner: httpx2.AsyncBaseTransport, mode: RecordingMode, directory: Path
) -> httpx2.AsyncBaseTransport:
    """Wrap `inner` (the transport that reaches the upstream) for `mode`, recording under `directory`.

    live: `inner` itself. record: a `RecordingTransport` that overwrites. record-if-missing: a
    `RecordingTransport` that replays existing recordings. replay: a `ReplayTransport`, which never
    sends anything through `inner` (it only closes it).
    """
    mode = _check_mode(mode)
    if mode == "live":
        return inner
    if mode == "replay":
        return ReplayTransport(directory, owned=inner)
    return RecordingTransport(inner, directory, overwrite=mode == "record")


# --- the key ---------------------------------------------------------------------------------


def request_key(method: str, path: str, body: bytes | None) -> tuple[str, dict[str, Any]]:
    """The sha256 hex digest and the canonical request it is computed over.

    `path` is the URL path, optionally with `?query`. The canonical request is
    `{"method", "path", "body"}` with the JSON body normalised, or `{"method", "path",
    "body_sha256"}` for a body that is not JSON.
    """
    canonical: dict[str, Any] = {"method": method.upper(), "path": _canonical_path(path)}
    parsed = _parse_json(body) if body else None
    if body and parsed is _NOT_JSON:
        canonical["body_sha256"] = hashlib.sha256(body).hexdigest()
    else:
        canonical["body"] = _normalise(parsed)
    return _digest(canonical), canonical


_NOT_JSON: Final = object()


def _parse_json(body: bytes) -> Json:
    try:
        return json.loads(body)
    except ValueError:  # also UnicodeDecodeError
        return _NOT_JSON


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


def _key_of(request: httpx2.Request) -> tuple[str, dict[str, Any]]:
    query = request.url.query.decode("ascii", "replace")
    path = f"{request.url.path}?{query}" if query else request.url.path
    return request_key(request.method, path, request.content)


def _slug(canonical_path: str) -> str:
    route = canonical_path.partition("?")[0]
    return re.sub(r"[^a-z0-9]+", "-", route.lower()).strip("-")[:_SLUG_MAX].strip("-") or "root"


def _file_name(key: str, canonical: Mapping[str, Any]) -> str:
    return f"{_slug(canonical['path'])}-{key[:_HASH_IN_NAME]}.json"


# --- the store -------------------------------------------------------------------------------


class _Store:
    """The recordings directory: a lazily built index of hash prefix -> file, and atomic writes.

    Only file names are indexed (cheap); a hit is read from disk each time, so a recording
    rewritten by another transport or process is never served stale.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._index: dict[str, Path] | None = None

    def find(self, key: str, canonical: Mapping[str, Any]) -> dict[str, Any] | None:
        """The recording for this request; rescans the directory once before giving up."""
        found = self._lookup(key, canonical)
        if found is None:
            self._index = None  # another process may have recorded it since we indexed
            found = self._lookup(key, canonical)
        return found

    def _lookup(self, key: str, canonical: Mapping[str, Any]) -> dict[str, Any] | None:
        path = self._scan().get(key[:_HASH_IN_NAME])
        if path is None:
            return None
        try:
            record = _load(path)
        except FileNotFoundError:
            return None
        # A 12-hex prefix collision or a hand-edited request must not answer for this one.
        return record if record.get("request") == canonical else None

    def _scan(self) -> dict[str, Path]:
        if self._index is None:
            index: dict[str, Path] = {}
            if self.directory.is_dir():
                for path in self.directory.glob("*.json"):
                    short = path.stem.rpartition("-")[2]
                    if len(short) == _HASH_IN_NAME and not path.name.startswith("."):
                        index[short] = path
            self._index = index
        return self._index

    def write(self, key: str, record: Mapping[str, Any]) -> Path:
        """Write `record` atomically (temp file + rename): readers never see half a file."""
        self.directory.mkdir(parents=True, exist_ok=True)
        target = self.directory / _file_name(key, record["request"])
        text = json.dumps(record, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
        fd, temp = tempfile.mkstemp(dir=self.directory, prefix=f".{target.stem}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as file:
                file.write(text)
            os.replace(temp, target)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp)
            raise
        self._scan()[key[:_HASH_IN_NAME]] = target
        return target

    def same_path(self, canonical: Mapping[str, Any]) -> list[tuple[Path, dict[str, Any]]]:
        """Recordings of requests to the same URL path (query ignored), for miss diagnostics."""
        route = str(canonical["path"]).partition("?")[0]
        prefix = _slug(route)
        found: list[tuple[Path, dict[str, Any]]] = []
        for short, path in sorted(self._scan().items()):
            if path.name != f"{prefix}-{short}.json":
                continue
            with contextlib.suppress(FileNotFoundError, ValueError):
                record = _load(path)
                if str(record["request"]["path"]).partition("?")[0] == route:
                    found.append((path, record))
        return found


def _load(path: Path) -> dict[str, Any]:
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not a valid recording: {exc}") from exc
    if not isinstance(record, dict) or "request" not in record or "response" not in record:
        raise ValueError(f"{path}: not a valid recording: expected an object with request and response")
    return record


# --- replaying -------------------------------------------------------------------------------


class ReplayMissError(httpx2.TransportError):
    """No recording matches a request in replay mode.

    A transport error, so clients see a failed request rather than a made-up answer. The message
    names the request, the nearest recording for the same path with a diff, and the command that
    records it. (The openai SDK retries transport errors and reports them as APIConnectionError
    caused by this one.)
    """

    def __init__(self, message: str, *, key: str, request: httpx2.Request | None = None) -> None:
        super().__init__(message, request=request)
        self.key = key


class ReplayTransport(httpx2.AsyncBaseTransport):
    """Answers every request from the recordings in `directory`; never contacts an upstream.

    `owned`, if given, is only closed along with this transport (the stack hands over the
    transport it would have used live).
    """

    def __init__(self, directory: Path, *, owned: httpx2.AsyncBaseTransport | None = None) -> None:
        self._store = _Store(directory)
        self._owned = owned

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        await request.aread()
        key, canonical = _key_of(request)
        record = self._store.find(key, canonical)
        if record is None:
            raise ReplayMissError(_miss_message(self._store, key, canonical), key=key, request=request)
        return _replayed_response(record["response"], request)

    async def aclose(self) -> None:
        if self._owned is not None:
            await self._owned.aclose()


def _replayed_response(response: Mapping[str, Any], request: httpx2.Request) -> httpx2.Response:
    status = int(response["status"])
    headers = dict(response.get("headers", {}))
    if "chunks" in response:
        stream = _ReplayStream(response["chunks"], response.get("stream_error"), request)
        return httpx2.Response(status, headers=headers, stream=stream, request=request)
    return httpx2.Response(status, headers=headers, content=_body_bytes(response), request=request)


def _body_bytes(response: Mapping[str, Any]) -> bytes:
    if "body" in response:
        return json.dumps(response["body"], ensure_ascii=False).encode()
    if "body_base64" in response:
        return base64.b64decode(response["body_base64"])
    return str(response.get("text", "")).encode()


class _ReplayStream(httpx2.AsyncByteStream):
    """Yields one SSE event per chunk, then raises the recorded stream error, if any.

    Resumable: iterating again continues where the last iteration stopped, as a network stream
    does (the openai SDK drains `response.stream` after `[DONE]`).
    """

    def __init__(self, chunks: list[Chunk], error: str | None, request: httpx2.Request) -> None:
        self._chunks = chunks
        self._error = error
        self._request = request
        self._position = 0

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while self._position < len(self._chunks):
            chunk = self._chunks[self._position]
            self._position += 1
            yield _encode_event(chunk)
        if self._error is not None:
            raise _stream_error(self._error, self._request)


def _encode_event(chunk: Chunk) -> bytes:
    event, data = (None, chunk) if isinstance(chunk, str) else (chunk.get("event"), chunk["data"])
    lines = [f"event: {event}"] if event else []
    lines += [f"data: {line}" for line in data.split("\n")]
    return ("\n".join(lines) + "\n\n").encode()


def _stream_error(recorded: str, request: httpx2.Request) -> httpx2.TransportError:
    name, sep, message = recorded.partition(": ")
    cls = getattr(httpx2, name, None) if sep else None
    if isinstance(cls, type) and issubclass(cls, httpx2.TransportError):
        return cls(f"replayed: {message}", request=request)
    return httpx2.RemoteProtocolError(f"replayed stream error: {recorded}", request=request)


# --- miss diagnostics ------------------------------------------------------------------------


def _miss_message(store: _Store, key: str, canonical: Mapping[str, Any]) -> str:
    lines = [
        f"no recording for {_summary(canonical)}",
        f"  key {key}, looked in {store.directory}",
        *_nearest_lines(store, canonical),
        f"  to record it: {MODE_ENV}=record-if-missing {_pytest_command()}",
    ]
    return "\n".join(lines)


def _summary(canonical: Mapping[str, Any]) -> str:
    """`POST /v1/chat/completions model=m last message: "..."`: enough to recognise the call."""
    text = f"{canonical['method']} {canonical['path']}"
    body = canonical.get("body")
    if isinstance(body, dict):
        if isinstance(body.get("model"), str):
            text += f" model={body['model']}"
        last = _last_message_text(body)
        if last:
            short = last if len(last) <= _SUMMARY_TEXT_MAX else last[: _SUMMARY_TEXT_MAX - 3] + "..."
            text += f" last message: {json.dumps(short, ensure_ascii=False)}"
    return text


def _last_message_text(body: Mapping[str, Any]) -> str | None:
    messages = body.get("messages")
    if isinstance(messages, list) and messages and isinstance(messages[-1], dict):
        content = messages[-1].get("content")
        if isinstance(content, str):
            return content
        if isinstance(content, list):  # content parts: keep the text ones
            texts = [p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)]
            return " ".join(texts) or None
    prompt = body.get("input", body.get("prompt"))  # responses / completions APIs
    return prompt if isinstance(prompt, str) else None


def _nearest_lines(store: _Store, canonical: Mapping[str, Any]) -> list[str]:
    route = str(canonical["path"]).partition("?")[0]
    wanted = _pretty_lines(canonical)
    scored = [
        (difflib.SequenceMatcher(None, _pretty_lines(record["request"]), wanted).ratio(), path, record)
        for path, record in store.same_path(canonical)
    ]
    if not scored:
        return [f"  no recording for {route} at all"]
    ratio, path, record = max(scored, key=lambda item: item[0])
    diff = difflib.unified_diff(_pretty_lines(record["request"]), wanted, path.name, "this request", n=1, lineterm="")
    shown = [_clip(line) for line in diff]
    if len(shown) > _DIFF_MAX_LINES:
        shown = shown[:_DIFF_MAX_LINES] + [f"... ({len(shown) - _DIFF_MAX_LINES} more diff lines)"]
    return [f"  nearest recording for {route}: {path.name} (similarity {ratio:.2f})", *("    " + s for s in shown)]


def _pretty_lines(canonical: Mapping[str, Any]) -> list[str]:
    return json.dumps(canonical, indent=2, sort_keys=True, ensure_ascii=False).splitlines()


def _clip(line: str) -> str:
    return line if len(line) <= _DIFF_LINE_MAX else line[: _DIFF_LINE_MAX - 3] + "..."


def _pytest_command() -> str:
    current = os.environ.get("PYTEST_CURRENT_TEST")
    if not current:
        return ".venv/bin/pytest ..."
    node_id = re.sub(r" \((setup|call|teardown)\)$", "", current)
    return f".venv/bin/pytest {shlex.quote(node_id)}"


# --- recording -------------------------------------------------------------------------------


class RecordingTransport(httpx2.AsyncBaseTransport):
    """Forwards requests to `inner` and records each exchange under `directory`.

    The response body reaches the caller chunk by chunk as it arrives (nothing is buffered
    first); the file is written when the body ends, fails or is closed (see the module docstring
    for what each case records). With `overwrite=False` (record-if-missing), a request that is
    already recorded is replayed instead of forwarded.
    """

    def __init__(self, inner: httpx2.AsyncBaseTransport, directory: Path, *, overwrite: bool = True) -> None:
        self._inner = inner
        self._store = _Store(directory)
        self._overwrite = overwrite

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        await request.aread()
        key, canonical = _key_of(request)
        if not self._overwrite and (record := self._store.find(key, canonical)) is not None:
            return _replayed_response(record["response"], request)
        upstream = await self._inner.handle_async_request(request)
        capture = _Capture(self._store, key, canonical, upstream)
        return httpx2.Response(
            upstream.status_code,
            headers=_passed_headers(upstream.headers),
            stream=_TeeStream(upstream, capture),
            request=request,
            extensions=upstream.extensions,
        )

    async def aclose(self) -> None:
        await self._inner.aclose()


def _passed_headers(headers: httpx2.Headers) -> list[tuple[bytes, bytes]]:
    # The caller gets the decoded body (that is what is recorded), so the encoding headers go.
    if "content-encoding" not in headers:
        return list(headers.raw)
    return [(k, v) for k, v in headers.raw if k.lower() not in (b"content-encoding", b"content-length")]


class _TeeStream(httpx2.AsyncByteStream):
    """Hands the upstream's (decoded) chunks to the caller as they come and to a `_Capture`.

    Resumable over one upstream iterator, like a network stream: the openai SDK iterates
    `response.stream` a second time to drain it after `[DONE]`.
    """

    def __init__(self, upstream: httpx2.Response, capture: _Capture) -> None:
        self._upstream = upstream
        self._chunks = upstream.aiter_bytes()
        self._capture = capture

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._chunks:
                self._capture.feed(chunk)
                yield chunk
        except Exception as exc:
            self._capture.finish(f"{type(exc).__name__}: {exc}")
            raise
        self._capture.finish(None)

    async def aclose(self) -> None:
        self._capture.finish(CLOSED_BY_CLIENT)
        try:
            await self._chunks.aclose()
        finally:
            await self._upstream.aclose()


class _Capture:
    """Collects one response as it streams past and writes its recording once, at the end."""

    def __init__(self, store: _Store, key: str, canonical: dict[str, Any], upstream: httpx2.Response) -> None:
        self._store = store
        self._key = key
        self._canonical = canonical
        self._status = upstream.status_code
        self._headers = {name: upstream.headers[name] for name in _KEPT_HEADERS if name in upstream.headers}
        content_type = upstream.headers.get("content-type", "").lower()
        self._sse = _SSEParser() if content_type.startswith("text/event-stream") else None
        self._json = "json" in content_type
        self._body = bytearray()
        self._done = False

    def feed(self, chunk: bytes) -> None:
        if self._sse is not None:
            self._sse.feed(chunk)
        else:
            self._body += chunk

    def finish(self, error: str | None) -> None:
        """Write the recording; `error` is why the body ended early, None if it ended normally."""
        if self._done:
            return
        self._done = True
        response: dict[str, Any] = {"status": self._status, "headers": self._headers}
        if self._sse is not None:
            response["chunks"] = self._sse.close(ended=error is None)
            if error == CLOSED_BY_CLIENT and "[DONE]" in response["chunks"]:
                error = None  # SDKs stop reading at [DONE]: the exchange was complete
            if error is not None:
                response["stream_error"] = error
        elif error is not None:
            return  # half a non-stream body cannot be replayed faithfully
        else:
            response.update(self._body_fields())
        self._store.write(self._key, {"request": self._canonical, "response": response})

    def _body_fields(self) -> dict[str, Any]:
        body = bytes(self._body)
        if self._json:
            parsed = _parse_json(body)
            if parsed is not _NOT_JSON:
                return {"body": parsed}
        try:
            return {"text": body.decode("utf-8")}
        except UnicodeDecodeError:
            return {"body_base64": base64.b64encode(body).decode("ascii")}


class _SSEParser:
    """Incremental server-sent-events parser: bytes in, one chunk per complete event out."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = ""
        self._chunks: list[Chunk] = []

    def feed(self, data: bytes) -> None:
        text = self._pending + self._decoder.decode(data)
        # A trailing "\r" may be the first half of a "\r\n" split across chunks: wait for more.
        held = "\r" if text.endswith("\r") else ""
        text = text[: len(text) - len(held)].replace("\r\n", "\n").replace("\r", "\n")
        *blocks, rest = text.split("\n\n")
        for block in blocks:
            self._add(block)
        self._pending = rest + held

    def close(self, ended: bool) -> list[Chunk]:
        """The chunks so far; if the stream `ended` normally, with an unterminated final event."""
        rest = (self._pending + self._decoder.decode(b"", final=True)).replace("\r\n", "\n").replace("\r", "\n")
        self._pending = ""
        # A cut stream's unfinished event never reached the caller as an event: leave it out.
        if ended and rest.strip():
            self._add(rest)
        return list(self._chunks)

    def _add(self, block: str) -> None:
        event, data = "", []
        for line in block.split("\n"):
            if not line or line.startswith(":"):
                continue  # blank or comment (keep-alive)
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field == "data":
                data.append(value)
            elif field == "event":
                event = value
        if not data and not event:
            return
        text = "\n".join(data)
        self._chunks.append({"event": event, "data": text} if event and event != "message" else text)
