"""Anthropic Messages requests as the inference router passes them through (to a provider that
takes them as they are, `contract.inference.protocol.MessagesPassthrough`): the model id renamed in
the bytes, and nothing else touched; the usage read as Anthropic reports it (for metrics, traces
and quotas, which count chat's `prompt_tokens` and `completion_tokens`); a stream's events metered
as they go by."""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from contract import fastjson
from contract.errors import APIError
from contract.inference.protocol import UpstreamRequest
from runtime.http.sse import close_frames
from runtime.observability.metrics import Metrics
from runtime.observability.tracing import Tracing
from runtime.security.quotas import spend_tokens

__all__ = ["account_message", "message_usage", "metered_events", "renamed", "usage_of_message"]

_PROMPT_KEYS = ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")


def renamed(document: bytes, old: str, new: str) -> bytes:
    """A Messages request or answer (JSON bytes) with its `model` `old` as `new`, every other byte
    as it was; where the pair is not found once (a tool's input may hold one too, or the client
    escaped it), the document parsed and written again."""
    spliced = _spliced(document, old, new)
    if spliced is not None:
        return spliced
    parsed = fastjson.loads(document)
    if isinstance(parsed, dict):
        parsed["model"] = new
    return fastjson.dumps(parsed)


def _spliced(document: bytes, old: str, new: str) -> bytes | None:
    """`document` with its one `"model": "old"` as `"model":"new"`; None unless it holds exactly one."""
    found = re.findall(rb'"model"\s*:\s*' + re.escape(fastjson.dumps(old)), document)
    return document.replace(found[0], b'"model":' + fastjson.dumps(new), 1) if len(found) == 1 else None


def message_usage(usage: Any) -> dict[str, int]:
    """Anthropic's `usage` as chat's: the input tokens, cache reads and cache writes as the prompt
    (Anthropic counts each apart), the output tokens as the completion."""
    if not isinstance(usage, Mapping):
        return {}
    prompt = sum(value for key in _PROMPT_KEYS if isinstance(value := usage.get(key), int))
    output = usage.get("output_tokens")
    completion = output if isinstance(output, int) else 0
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def usage_of_message(answer: bytes) -> dict[str, int]:
    """The usage of a whole `Message` answer (its bytes), as chat's."""
    try:
        document = fastjson.loads(answer)
    except ValueError:
        return {}
    return message_usage(document.get("usage")) if isinstance(document, dict) else {}


async def account_message(answer: bytes, provider_id: str, request: UpstreamRequest, metrics: Metrics | None, started: float) -> None:
    """A whole answer's timing and tokens in the metrics, and its tokens against the request's quota."""
    counts = usage_of_message(answer)
    model = str(request.body.get("model"))
    if metrics is not None:
        metrics.upstream_seconds.observe((provider_id, model, "messages"), time.perf_counter() - started)
        metrics.record_usage(provider_id, model, counts)
    await spend_tokens(counts)


class _StreamUsage:
    """A stream's usage: message_start's (the input, and the output so far), then message_delta's
    (the output in the end; the input again, from some servers)."""

    def __init__(self) -> None:
        self.usage: dict[str, int] = {}
        self.last: bytes = b""
        """The data of the last event that carried usage (message_delta's holds the stop reason)."""

    def read(self, frame: bytes) -> str | None:
        """The event's type, when `frame` carries usage (read into this)."""
        data = _data(frame)
        try:
            event = fastjson.loads(data)
        except ValueError:
            return None
        if not isinstance(event, dict):
            return None
        kind = event.get("type")
        message = event.get("message")
        usage = message.get("usage") if kind == "message_start" and isinstance(message, dict) else event.get("usage")
        if not isinstance(usage, dict):
            return None
        for key, value in usage.items():  # counts so far: message_delta's are the stream's totals
            if isinstance(value, int) and value >= self.usage.get(key, 0):
                self.usage[key] = value
        self.last = data
        return str(kind)


async def metered_events(events: AsyncIterator[bytes], provider_id: str, request: UpstreamRequest, requested: str | None,
                         metrics: Metrics | None, tracing: Tracing | None, unreachable: Callable[[str, str], None]) -> AsyncIterator[bytes]:
    """A streamed answer's events as the upstream sent them (message_start's `model` as the client
    named it, `requested`), with their time to the first event and to the end, their tokens (in the
    metrics and against the quota, at message_delta or, when the stream broke before it, at its end),
    the model call's span, and an unreachable upstream noted for /v1/health."""
    model = str(request.body.get("model"))
    started = time.perf_counter()
    span = tracing.start_model_call("chat", provider_id, model, request.body) if tracing is not None else None
    usage, counted, first = _StreamUsage(), False, True
    try:
        async for frame in events:
            if first:  # message_start
                first = False
                if metrics is not None:
                    metrics.first_token_seconds.observe((provider_id, model), time.perf_counter() - started)
                if requested is not None:
                    frame = _renamed_event(frame, model, requested)
            if b'"usage"' in frame and usage.read(frame) == "message_delta":  # a bytes scan: only the events with usage are parsed
                counted = True
                await _counted(usage, provider_id, model, metrics, tracing, span)
            yield frame
        if not counted and usage.usage:
            await _counted(usage, provider_id, model, metrics, tracing, span)
    except APIError as error:
        if error.code == "upstream_unreachable":
            unreachable(provider_id, error.message)
        raise
    finally:
        if span is not None:
            span.end()
        await close_frames(events)
    if metrics is not None:
        metrics.upstream_seconds.observe((provider_id, model, "messages"), time.perf_counter() - started)


async def _counted(usage: _StreamUsage, provider_id: str, model: str, metrics: Metrics | None, tracing: Tracing | None,
                   span: Any) -> None:
    counts = message_usage(usage.usage)
    await spend_tokens(counts)
    if metrics is not None:
        metrics.record_usage(provider_id, model, counts)
    if tracing is not None:
        tracing.finished(span, counts, usage.last)


def _data(frame: bytes) -> bytes:
    """The data of one SSE event (its `data:` lines joined)."""
    lines = [line[6:] if line[5:6] == b" " else line[5:] for line in frame.splitlines() if line.startswith(b"data:")]
    return lines[0] if len(lines) == 1 else b"\n".join(lines)


def _renamed_event(frame: bytes, old: str, new: str) -> bytes:
    """message_start's frame with its message's `model` as the client named it (any other event as it is)."""
    spliced = _spliced(frame, old, new)
    if spliced is not None:
        return spliced
    try:
        event = fastjson.loads(_data(frame))
    except ValueError:
        return frame
    message = event.get("message") if isinstance(event, dict) and event.get("type") == "message_start" else None
    if not isinstance(message, dict):
        return frame
    message["model"] = new
    return b"event: message_start\ndata: " + fastjson.dumps(event) + b"\n\n"
