"""Upstream answers as the inference router passes them on: checked whole, their usage metered
(metrics, traces, quotas), the client's model id put back, embeddings reshaped."""

from __future__ import annotations

import base64
import struct
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

from contract import fastjson
from contract.errors import UpstreamError
from contract.inference.protocol import UpstreamRequest
from runtime.observability.metrics import Metrics, usage_counts
from runtime.observability.tracing import Tracing
from runtime.security.quotas import spend_tokens, token_meter

__all__ = [
    "account", "asking_usage", "chunks_with_model", "malformed", "metered", "parsed_chunk", "parsed_completion", "reshaped_embeddings",
    "text_completion_choices", "text_or_none", "with_model",
]


def asking_usage(body: Mapping[str, Any], raw: bytes | None) -> tuple[Mapping[str, Any], bytes | None, bool]:
    """A stream's request with the upstream asked for usage (quotas, metrics and traces count its
    tokens), and whether the client did not ask for it (its usage chunk is then kept from it)."""
    if (body.get("stream_options") or {}).get("include_usage"):
        return body, raw, False
    return {**body, "stream_options": {**(body.get("stream_options") or {}), "include_usage": True}}, None, True


def text_completion_choices(body: Mapping[str, Any]) -> int:
    """How many choices a completions request asks for: `n` for each of its prompts."""
    prompt, n = body.get("prompt"), body.get("n")
    prompts = len(prompt) if isinstance(prompt, list) and prompt and not isinstance(prompt[0], int) else 1
    return prompts * (n if isinstance(n, int) and n > 0 else 1)


def reshaped_embeddings(result: bytes, *, base64_vectors: bool, model: str | None) -> bytes:
    document = fastjson.loads(result)
    if base64_vectors:
        for item in document.get("data") or ():
            vector = item.get("embedding")
            if isinstance(vector, list):
                item["embedding"] = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
    if model is not None and isinstance(document, dict):
        document["model"] = model
    return fastjson.dumps(document)


def with_model(result: bytes, model: str) -> bytes:
    document = fastjson.loads(result)
    if not isinstance(document, dict):
        return result
    document["model"] = model
    return fastjson.dumps(document)


def parsed_completion(result: bytes, provider_id: str) -> dict[str, Any]:
    try:
        completion = fastjson.loads(result)
    except ValueError:
        completion = None
    if not isinstance(completion, dict):
        raise malformed(provider_id, result)
    return completion


def parsed_chunk(raw: bytes, provider_id: str) -> dict[str, Any]:
    """A stream chunk as an object; a malformed one is the upstream's error (the client gets an
    error event and a clean end, not a cut connection)."""
    try:
        chunk = fastjson.loads(raw)
    except ValueError:
        raise malformed(provider_id, raw) from None
    if not isinstance(chunk, dict):
        raise malformed(provider_id, raw)
    return chunk


async def account(result: bytes, provider_id: str, request: UpstreamRequest, kind: str, metrics: Metrics | None,
                   started: float) -> None:
    """A whole answer's timing and tokens in the metrics, and its usage against the request's meter
    (its bytes scanned once for both)."""
    counts = usage_counts(result) if token_meter() is not None else None
    if metrics is not None:
        metrics.call_done(provider_id, str(request.body.get("model")), kind, time.perf_counter() - started,
                          result if counts is None else counts)
    if counts is not None:
        await spend_tokens(counts)


async def metered(chunks: AsyncIterator[bytes], hide_usage: bool, metrics: Metrics | None, provider: str, request: UpstreamRequest,
                   tracing: Tracing | None, kind: str = "chat") -> AsyncIterator[bytes]:
    """The chunks, with the tokens of the usage chunk recorded against the request's quota and in
    the metrics (that chunk left out when only they asked for it), the stream's timings, and its
    model call span."""
    model = str(request.body.get("model"))
    started = time.perf_counter()
    first = True
    span = tracing.start_model_call(kind, provider, model, request.body) if tracing is not None else None
    try:
        finish: list[bytes] = []
        async for raw in chunks:
            if first and metrics is not None:
                metrics.first_token_seconds.observe((provider, model), time.perf_counter() - started)
            first = False
            if tracing is not None and b'"finish_reason":"' in raw:
                finish.append(raw)
            if b'"usage"' in raw:  # a bytes scan: only the chunk that carries usage is parsed
                try:
                    chunk = fastjson.loads(raw)
                except ValueError:
                    chunk = None
                if isinstance(chunk, dict) and isinstance(chunk.get("usage"), dict):
                    await spend_tokens(chunk["usage"])
                    if metrics is not None:
                        metrics.record_usage(provider, model, chunk["usage"])
                    if tracing is not None:
                        tracing.finished(span, chunk["usage"])
                    if hide_usage and not chunk.get("choices"):
                        continue
            yield raw
        if tracing is not None:
            tracing.finished(span, {}, b"".join(finish))
    finally:
        if span is not None:
            span.end()
    if metrics is not None:
        metrics.upstream_seconds.observe((provider, model, kind), time.perf_counter() - started)


async def chunks_with_model(chunks: AsyncIterator[bytes], model: str, provider_id: str) -> AsyncIterator[bytes]:
    async for raw in chunks:
        chunk = parsed_chunk(raw, provider_id)
        chunk["model"] = model
        yield fastjson.dumps(chunk)


def malformed(provider: str, body: bytes) -> UpstreamError:
    return UpstreamError(f"The model server ({provider}) answered with malformed data, not a JSON object: {body[:120]!r}",
                         status_code=502, code="upstream_malformed")


def text_or_none(value: Any) -> str | None:
    return None if value is None else str(value)
