"""What the inference routes answer besides an upstream's bytes: a stream's frames (its first chunk
awaited before the 200, its end told rather than cut at a fault or a shutdown), a client gone
(499), and the refusals of the input guardrail, as a model's refusal would read."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response

from contract import fastjson
from contract.errors import APIError, error_body
from contract.ids import random_hex
from runtime.apis.common import JSONBytes, unless_disconnected
from runtime.apis.inference.upstream import text_completion_choices
from runtime.apis.inference.store import new_completion_id
from runtime.http.middleware import Draining
from runtime.http.sse import DONE, EventStreamResponse, close_frames, sse_frame

if TYPE_CHECKING:
    from runtime.apis.inference.router import InferenceRouter

__all__ = ["json_or_gone", "new_messages", "prompt_texts", "refused", "refused_text", "sse_response", "stream_frames"]

JSON = "application/json"
log = logging.getLogger("stack")

SHUTDOWN_ERROR = error_body("The server shut down before this completion finished.", "server_error", code="server_shutting_down")
STREAM_FAULT = error_body("The server had an error while streaming this completion; its log names the cause.", "server_error")


async def sse_response(request: Request, chunks: AsyncIterator[bytes]) -> Response:
    # The first chunk is awaited before the 200 goes out, so an upstream that refuses the
    # request (a 400, a 429) is answered with its own status instead of a broken stream. A
    # client that leaves meanwhile cancels the upstream call (it may be long: a long prompt).
    iterator = aiter(chunks)
    try:
        first = await unless_disconnected(request, anext(iterator))
    except StopAsyncIteration:
        first = None
    else:
        if first is None:
            await close_frames(iterator)
            return Response(status_code=499)
    # The role chunk and the first token's go out at once: the time to the first token does not
    # wait for the rest of a burst read with it.
    return EventStreamResponse(stream_frames(first, iterator, getattr(request.app.state, "draining", None)), flush_after=2)


async def stream_frames(first: bytes | None, rest: AsyncIterator[bytes], draining: Draining | None) -> AsyncIterator[bytes]:
    if first is None:
        yield sse_frame(DONE)
        return
    yield sse_frame(first)
    # Registered for the shutdown's interruption: the task waiting for a chunk is the response's own
    # for the head of the stream, then its producer's (runtime.http.sse), so it is noted at each wait.
    wait = draining.stream() if draining is not None else None
    loop = asyncio.get_running_loop()
    try:
        while True:
            # The shutdown's grace period is over (while no chunk was awaited, or during the wait):
            # the client is told, not cut off.
            interrupted = draining is not None and draining.ending
            if not interrupted:
                try:
                    if wait is not None:
                        wait.task, wait.waiting = asyncio.current_task(loop), True
                    try:
                        chunk = await anext(rest)
                    finally:
                        if wait is not None:
                            wait.waiting = False
                except StopAsyncIteration:
                    break
                except APIError as error:
                    # The status line may be gone; the SDK raises on a data event that carries an error.
                    yield sse_frame(json.dumps(error.body()).encode())
                    return
                except Exception:
                    # A fault of the server's own or of a provider: the client is told, not cut off;
                    # the log has the cause.
                    log.exception("a chat completion stream failed")
                    yield sse_frame(json.dumps(STREAM_FAULT).encode())
                    return
                except asyncio.CancelledError:
                    if draining is None or not draining.ending or wait is None or wait.task is None:
                        raise
                    wait.task.uncancel()
                    interrupted = True
            if interrupted:
                await close_frames(rest)
                yield sse_frame(json.dumps(SHUTDOWN_ERROR).encode())
                return
            yield sse_frame(chunk)
        yield sse_frame(DONE)
    finally:
        if draining is not None and wait is not None:
            draining.unregister(wait)


def json_or_gone(body: bytes | None) -> Response:
    # 499 (client closed request) is never seen by the client; it is what the server logs show.
    return Response(status_code=499) if body is None else Response(body, media_type=JSON)


def new_messages(messages: Any) -> list[Any]:
    """The messages after the last assistant message: what this request adds to the conversation
    (what came before was checked when it was new)."""
    if not isinstance(messages, list):
        return []
    last = max((index for index, message in enumerate(messages) if isinstance(message, dict) and message.get("role") == "assistant"),
               default=-1)
    return [message for message in messages[last + 1:] if isinstance(message, dict)]


def prompt_texts(prompt: Any) -> list[str]:
    """The text prompts of a request (token prompts carry no text the guardrail could read)."""
    if isinstance(prompt, str):
        return [prompt]
    return [item for item in prompt if isinstance(item, str)] if isinstance(prompt, list) else []


async def refused(impl: InferenceRouter, body: dict[str, Any], refusal: str) -> Response:
    """The answer to flagged input, as a model's refusal (`finish_reason: content_filter`), streamed
    or not; stored like any completion when the request asks for it."""
    completion_id, created, model = new_completion_id(), int(time.time()), str(body.get("model"))
    usage = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
    completion = {"id": completion_id, "object": "chat.completion", "created": created, "model": model,
                  "choices": [{"index": 0, "message": {"role": "assistant", "content": None, "refusal": refusal},
                               "logprobs": None, "finish_reason": "content_filter"}], "usage": usage}
    if body.get("store") is True:
        await impl.store.save(completion, list(body["messages"]), body.get("metadata"), None)
    if body.get("stream") is not True:
        return JSONBytes(completion)
    base = {"id": completion_id, "object": "chat.completion.chunk", "created": created, "model": model}
    chunks = [{**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": None, "refusal": refusal},
                                    "logprobs": None, "finish_reason": None}]},
              {**base, "choices": [{"index": 0, "delta": {}, "logprobs": None, "finish_reason": "content_filter"}]}]
    if (body.get("stream_options") or {}).get("include_usage"):
        chunks.append({**base, "choices": [], "usage": usage})
    frames = b"".join(b"data: " + fastjson.dumps(chunk) + b"\n\n" for chunk in chunks) + b"data: [DONE]\n\n"
    return Response(frames, media_type="text/event-stream")


def refused_text(body: dict[str, Any]) -> Response:
    """The answer to a flagged prompt: each choice empty, `finish_reason: content_filter` (as
    Azure OpenAI answers a filtered completion: the legacy API has no refusal field)."""
    created, model, count = int(time.time()), str(body.get("model")), text_completion_choices(body)
    usage = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
    base = {"id": f"cmpl-{random_hex(16)}", "object": "text_completion", "created": created, "model": model}
    choices = [{"text": "", "index": index, "logprobs": None, "finish_reason": "content_filter"} for index in range(count)]
    if body.get("stream") is not True:
        return JSONBytes({**base, "choices": choices, "usage": usage})
    chunks = [{**base, "choices": [choice]} for choice in choices]
    if (body.get("stream_options") or {}).get("include_usage"):
        chunks.append({**base, "choices": [], "usage": usage})
    frames = b"".join(b"data: " + fastjson.dumps(chunk) + b"\n\n" for chunk in chunks) + b"data: [DONE]\n\n"
    return Response(frames, media_type="text/event-stream")
