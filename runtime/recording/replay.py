"""Replaying: answering requests from recordings, and explaining a miss."""

from __future__ import annotations

import base64
import difflib
import json
import os
import re
import shlex
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any, Final

import httpx2

from runtime.recording._common import MODE_ENV, Chunk
from runtime.recording.keys import key_of
from runtime.recording.store import RecordingStore

_DIFF_MAX_LINES: Final = 15
_DIFF_LINE_MAX: Final = 160
_SUMMARY_TEXT_MAX: Final = 80


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
        self._store = RecordingStore(directory)
        self._owned = owned

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        await request.aread()
        key, canonical = key_of(request)
        record = self._store.find(key, canonical)
        if record is None:
            raise ReplayMissError(_miss_message(self._store, key, canonical), key=key, request=request)
        return replayed_response(record["response"], request)

    async def aclose(self) -> None:
        if self._owned is not None:
            await self._owned.aclose()


def replayed_response(response: Mapping[str, Any], request: httpx2.Request) -> httpx2.Response:
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


def _miss_message(store: RecordingStore, key: str, canonical: Mapping[str, Any]) -> str:
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


def _nearest_lines(store: RecordingStore, canonical: Mapping[str, Any]) -> list[str]:
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

