"""Routes of the inference API: /v1/chat/completions, /v1/completions (legacy), /v1/embeddings, /v1/models.

The create routes read the raw body and hand it on: the upstream validates the parameters it
knows, so every field the SDK sends (and any `extra_body` field) reaches it unchanged, and a
request whose model needs no renaming is forwarded as the very bytes the client sent.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response

from runtime.apis.common import (
    MAX_STRING, METADATA_SCHEMA, JSONBytes, json_body, cursor_page, parse_json_object, unless_disconnected, validate_limit, validate_metadata, validate_order,
)
from runtime.apis.files.inline import chat_messages_with_files
from runtime.apis.inference.checks import COMMON_SHAPES, SHAPES, check_message, json_type_name
from runtime.apis.inference.router import text_completion_choices
from runtime.apis.files.protocol import FilesProvider
from runtime.apis.inference.store import new_completion_id
from runtime.apis.safety.guard import guard_input
from runtime.apis.safety.protocol import SafetyProvider
from runtime.direct_routes import read_body
from runtime import fastjson
from runtime.errors import APIError, InvalidRequestError, error_body
from runtime.ids import random_hex
from runtime.middleware import Draining
from runtime.routing import Routes
from runtime.sse import DONE, EventStreamResponse, close_frames, sse_frame

if TYPE_CHECKING:
    from runtime.apis.inference.router import InferenceRouter

__all__ = ["router"]

JSON = "application/json"
log = logging.getLogger("stack")

SHUTDOWN_ERROR = error_body("The server shut down before this completion finished.", "server_error", code="server_shutting_down")
STREAM_FAULT = error_body("The server had an error while streaming this completion; its log names the cause.", "server_error")
# OpenAI documents no maximum `limit` for stored chat completions (clients ask for 1,000).
CHAT_LIST_MAX = 1000
_ROLES = ("system", "developer", "user", "assistant", "tool", "function")


# The numeric bounds below are _NUMBERS', which the route checks; other fields are forwarded.
CHAT_BODY = json_body(["model", "messages"], {
    "model": {"type": "string", "description": "provider_id/model, a bare model name, or a registered model id"},
    "messages": {"type": "array", "minItems": 1, "items": {"type": "object", "required": ["role"], "properties": {
        "role": {"type": "string", "enum": ["system", "developer", "user", "assistant", "tool", "function"]},
        "content": {"anyOf": [{"type": "string", "maxLength": MAX_STRING}, {"type": "array", "minItems": 1, "items": {"type": "object"}},
                              {"type": "null"}]}}}},
    "stream": {"type": ["boolean", "null"]},
    "store": {"type": ["boolean", "null"], "description": "keep the completion for GET /v1/chat/completions"},
    "metadata": METADATA_SCHEMA,
    "tools": {"type": "array", "items": {"type": "object", "required": ["type"]}},
    "stream_options": {"type": "object"},
    "temperature": {"type": ["number", "null"], "minimum": 0, "maximum": 2},
    "top_p": {"type": ["number", "null"], "minimum": 0, "maximum": 1},
    "presence_penalty": {"type": ["number", "null"], "minimum": -2, "maximum": 2},
    "frequency_penalty": {"type": ["number", "null"], "minimum": -2, "maximum": 2},
    "n": {"type": ["integer", "null"], "minimum": 1, "maximum": 128},
    "max_tokens": {"type": ["integer", "null"], "minimum": 1},
    "max_completion_tokens": {"type": ["integer", "null"], "minimum": 1},
    "top_logprobs": {"type": ["integer", "null"], "minimum": 0, "maximum": 20},
})
COMPLETIONS_BODY = json_body(["model", "prompt"], {
    "model": {"type": "string", "description": "provider_id/model, a bare model name, or a registered model id"},
    "prompt": {"anyOf": [{"type": "string"}, {"type": "array", "minItems": 1, "items": {"type": "string"}},
                         {"type": "array", "minItems": 1, "items": {"type": "integer"}},
                         {"type": "array", "minItems": 1, "items": {"type": "array", "minItems": 1, "items": {"type": "integer"}}}]},
    "stream": {"type": ["boolean", "null"]},
    "stream_options": {"type": ["object", "null"]},
    "echo": {"type": ["boolean", "null"]},
    "suffix": {"type": ["string", "null"]},
    "temperature": {"type": ["number", "null"], "minimum": 0, "maximum": 2},
    "top_p": {"type": ["number", "null"], "minimum": 0, "maximum": 1},
    "presence_penalty": {"type": ["number", "null"], "minimum": -2, "maximum": 2},
    "frequency_penalty": {"type": ["number", "null"], "minimum": -2, "maximum": 2},
    "n": {"type": ["integer", "null"], "minimum": 1, "maximum": 128},
    "best_of": {"type": ["integer", "null"], "minimum": 0, "maximum": 20},
    "logprobs": {"type": ["integer", "null"], "minimum": 0, "maximum": 5},
    "max_tokens": {"type": ["integer", "null"], "minimum": 0},
})
EMBEDDINGS_BODY = json_body(["model", "input"], {
    "model": {"type": "string"},
    "input": {"oneOf": [{"type": "string"}, {"type": "array"}]},
    "encoding_format": {"type": "string", "enum": ["float", "base64"]},
    "dimensions": {"type": "integer", "minimum": 1},
})


def router(impl: InferenceRouter, files: FilesProvider | None = None, safety: SafetyProvider | None = None) -> Routes:
    guarded = safety if safety is not None and safety.guardrails.input else None
    output_guard = safety if safety is not None and safety.guardrails.output else None
    routes = Routes()

    @routes.post("/chat/completions", summary="Create a chat completion (streamed with `stream: true`)", openapi_extra=CHAT_BODY)
    async def create_chat_completion(request: Request) -> Response:
        raw = await read_body(request)
        body = parse_json_object(raw)
        _check_chat_body(body)
        forwarded: bytes | None = raw
        if b'"file_id"' in raw:  # a bytes scan: the hot path parses nothing more
            body["messages"] = await chat_messages_with_files(body["messages"], files)
            forwarded = None  # the upstream is sent the body as read in
        if guarded is not None:
            refusal = await guard_input(guarded, None, _new_messages(body["messages"]))
            if refusal is not None:
                return await _refused(impl, body, refusal)
        if body.get("stream") is True:
            return await _sse_response(request, await impl.stream_chat_completion(body, forwarded, guard=output_guard))
        return _json_or_gone(await unless_disconnected(request, impl.chat_completion(body, forwarded, guard=output_guard)))

    @routes.post("/completions", summary="Create a completion (the legacy API; streamed with `stream: true`)", openapi_extra=COMPLETIONS_BODY)
    async def create_completion(request: Request) -> Response:
        raw = await read_body(request)
        body = parse_json_object(raw)
        _check_completions_body(body)
        if guarded is not None:
            refusal = await guard_input(guarded, None, [{"role": "user", "content": text} for text in _prompt_texts(body["prompt"])])
            if refusal is not None:
                return _refused_text(body)
        if body.get("stream") is True:
            return await _sse_response(request, await impl.stream_text_completion(body, raw, guard=output_guard))
        return _json_or_gone(await unless_disconnected(request, impl.text_completion(body, raw, guard=output_guard)))

    @routes.get("/chat/completions", summary="List stored chat completions")
    async def list_chat_completions(
        request: Request, after: str | None = None, limit: int = 20, order: str = "asc", model: str | None = None
    ) -> Response:
        metadata = _metadata_filter(request)
        data, has_more = await impl.store.page(
            after=after, limit=validate_limit(limit, CHAT_LIST_MAX), order=validate_order(order), model=model, metadata=metadata
        )
        return JSONBytes(cursor_page(data, has_more))

    @routes.get("/chat/completions/{completion_id}", summary="Get a stored chat completion")
    async def get_chat_completion(completion_id: str) -> Response:
        return JSONBytes(await impl.store.get(completion_id))

    @routes.post("/chat/completions/{completion_id}", summary="Update a stored chat completion's metadata",
                 openapi_extra=json_body(["metadata"], {"metadata": METADATA_SCHEMA}))
    async def update_chat_completion(completion_id: str, request: Request) -> Response:
        body = parse_json_object(await read_body(request))
        if "metadata" not in body:
            raise InvalidRequestError("Missing required parameter: 'metadata'.", param="metadata", code="missing_required_parameter")
        return JSONBytes(await impl.store.update_metadata(completion_id, validate_metadata(body["metadata"])))

    @routes.delete("/chat/completions/{completion_id}", summary="Delete a stored chat completion")
    async def delete_chat_completion(completion_id: str) -> Response:
        await impl.store.delete(completion_id)  # a 404 for an id the caller may not delete
        return JSONBytes({"id": completion_id, "object": "chat.completion.deleted", "deleted": True})

    @routes.get("/chat/completions/{completion_id}/messages", summary="List the input messages of a stored chat completion")
    async def list_chat_completion_messages(
        completion_id: str, after: str | None = None, limit: int = 20, order: str = "asc"
    ) -> Response:
        messages = _store_messages(completion_id, await impl.store.messages(completion_id))
        return JSONBytes(_page_in_memory(messages, after, validate_limit(limit, CHAT_LIST_MAX), validate_order(order)))

    @routes.post("/embeddings", summary="Create embeddings", openapi_extra=EMBEDDINGS_BODY)
    async def create_embeddings(request: Request) -> Response:
        raw = await read_body(request)
        body = parse_json_object(raw)
        _check_embeddings_body(body)
        return _json_or_gone(await unless_disconnected(request, impl.embeddings(body, raw)))

    @routes.get("/models", summary="List models")
    async def list_models() -> Response:
        await impl.refresh_if_stale()
        return JSONBytes({"object": "list", "data": [entry.public() for entry in impl.models()]})

    @routes.get("/models/{model_id:path}", summary="Get a model")
    async def get_model(model_id: str) -> Response:
        return JSONBytes((await impl.resolve(model_id)).public())

    return routes


def _check_embeddings_body(body: dict[str, Any]) -> None:
    """OpenAI's own checks of an embeddings request, made before any provider sees it: an empty
    text would be embedded as a zero vector by some models (no direction: no similarity to
    anything), and an unknown encoding read as floats."""
    if "input" not in body:
        raise InvalidRequestError("Missing required parameter: 'input'.", param="input", code="missing_required_parameter")
    texts = body["input"]
    if texts == "" or texts == []:
        raise InvalidRequestError("Invalid 'input': expected a non-empty string or a non-empty array.", param="input", code="invalid_value")
    if isinstance(texts, list):
        for index, text in enumerate(texts):
            if text == "" or text == []:
                raise InvalidRequestError(f"Invalid 'input[{index}]': expected a non-empty string or array of tokens.",
                                          param=f"input[{index}]", code="invalid_value")
    encoding = body.get("encoding_format")
    if encoding is not None and encoding not in ("float", "base64"):
        raise InvalidRequestError(f"Invalid value: {str(encoding)[:40]!r}. Supported values are: 'float' and 'base64'.",
                                  param="encoding_format", code="invalid_value")


def _check_completions_body(body: dict[str, Any]) -> None:
    """OpenAI's checks of a legacy completions request, before any provider sees it."""
    if "prompt" not in body or body["prompt"] is None:
        raise InvalidRequestError("Missing required parameter: 'prompt'.", param="prompt", code="missing_required_parameter")
    prompt = body["prompt"]
    if not (isinstance(prompt, str) or (isinstance(prompt, list) and prompt and (
            all(isinstance(item, str) for item in prompt) or all(_is_token(item) for item in prompt)
            or all(isinstance(item, list) and item and all(_is_token(token) for token in item) for item in prompt)))):
        raise InvalidRequestError("Invalid 'prompt': expected a string, an array of strings, an array of tokens, or an array of "
                                  "token arrays (none of them empty).", param="prompt", code="invalid_value")
    for flag in ("stream", "echo"):
        if body.get(flag) is not None and not isinstance(body[flag], bool):
            raise InvalidRequestError(f"Invalid type for '{flag}': expected a boolean.", param=flag, code="invalid_type")
    if body.get("suffix") is not None and not isinstance(body["suffix"], str):
        raise InvalidRequestError("Invalid type for 'suffix': expected a string.", param="suffix", code="invalid_type")
    if body.get("stream_options") is not None and not isinstance(body["stream_options"], dict):
        raise InvalidRequestError("Invalid type for 'stream_options': expected an object.", param="stream_options", code="invalid_type")
    for name in _TEXT_NUMBERS.keys() & body.keys():
        _check_number(name, body[name], _TEXT_NUMBERS)
    for name in COMMON_SHAPES.keys() & body.keys():
        COMMON_SHAPES[name](body[name], body)
    best_of, n = body.get("best_of"), body.get("n")
    if isinstance(best_of, int) and best_of < (n if isinstance(n, int) else 1):
        raise InvalidRequestError("Invalid 'best_of': it must be at least 'n'.", param="best_of", code="invalid_value")
    if body.get("stream") is True and isinstance(best_of, int) and best_of > (n if isinstance(n, int) else 1):
        raise InvalidRequestError("Invalid 'best_of': a stream cannot be given with 'best_of' greater than 'n'.", param="best_of",
                                  code="invalid_value")


def _is_token(value: Any) -> bool:
    return value.__class__ is int


def _prompt_texts(prompt: Any) -> list[str]:
    """The text prompts of a request (token prompts carry no text the guardrail could read)."""
    if isinstance(prompt, str):
        return [prompt]
    return [item for item in prompt if isinstance(item, str)] if isinstance(prompt, list) else []


def _refused_text(body: dict[str, Any]) -> Response:
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


def _check_chat_body(body: dict[str, Any]) -> None:
    messages = body.get("messages")
    if messages is None:
        raise InvalidRequestError("Missing required parameter: 'messages'.", param="messages", code="missing_required_parameter")
    if not isinstance(messages, list) or not messages:
        raise InvalidRequestError("Invalid 'messages': expected a non-empty array of messages.", param="messages", code="invalid_value")
    for index, message in enumerate(messages):
        if message.__class__ is not dict:
            raise InvalidRequestError(f"Invalid type for 'messages[{index}]': expected an object.", param=f"messages[{index}]",
                                      code="invalid_type")
        if message.get("role") not in _ROLES:
            raise InvalidRequestError(
                f"Invalid value for 'messages[{index}].role': {str(message.get('role'))[:40]!r} (expected one of: {', '.join(_ROLES)}).",
                param=f"messages[{index}].role", code="invalid_value")
        content = message.get("content")
        if content.__class__ is str:
            if len(content) > MAX_STRING:
                raise InvalidRequestError(
                    f"Invalid 'messages[{index}].content': string too long. Expected a string with maximum length {MAX_STRING}, but got "
                    f"a string with length {len(content)} instead.", param=f"messages[{index}].content", code="string_above_max_length")
            if message["role"] == "tool" and "tool_call_id" not in message:
                check_message(message, index)
        else:  # parts, or none: the rarer shapes, checked in full
            check_message(message, index)
    for flag in ("stream", "store"):
        if body.get(flag) is not None and not isinstance(body[flag], bool):
            raise InvalidRequestError(f"Invalid type for '{flag}': expected a boolean.", param=flag, code="invalid_type")
    for name in _NUMBERS.keys() & body.keys():  # usually one or two keys: a set intersection, no loop over all
        _check_number(name, body[name])
    for name in SHAPES.keys() & body.keys():
        SHAPES[name](body[name], body)
    if body.get("store") is True:
        validate_metadata(body.get("metadata"))


# The standard numeric parameters: (integer?, minimum, maximum), OpenAI's bounds. Checked here so a
# mistake gets OpenAI's 400 whatever the upstream would have done with it (some clamp silently).
_NUMBERS: dict[str, tuple[bool, float, float | None]] = {
    "temperature": (False, 0, 2), "top_p": (False, 0, 1), "presence_penalty": (False, -2, 2), "frequency_penalty": (False, -2, 2),
    "n": (True, 1, 128), "max_tokens": (True, 1, None), "max_completion_tokens": (True, 1, None), "top_logprobs": (True, 0, 20),
}


# The legacy completions API's own bounds (`max_tokens` may be 0 there: with `echo`, the prompt alone).
_TEXT_NUMBERS: dict[str, tuple[bool, float, float | None]] = {
    **{name: _NUMBERS[name] for name in ("temperature", "top_p", "presence_penalty", "frequency_penalty", "n")},
    "max_tokens": (True, 0, None), "best_of": (True, 0, 20), "logprobs": (True, 0, 5),
}


def _check_number(name: str, value: Any, bounds: dict[str, tuple[bool, float, float | None]] = _NUMBERS) -> None:
    if value is None:
        return
    integer, low, high = bounds[name]
    kind = "integer" if integer else "decimal"
    if value.__class__ is not int and (integer or value.__class__ is not float):
        got = json_type_name(value)
        raise InvalidRequestError(f"Invalid type for '{name}': expected {'an' if integer else 'a'} {kind}, but got {got} instead.",
                                  param=name, code="invalid_type")
    if value < low:
        raise InvalidRequestError(f"Invalid '{name}': {kind} below minimum value. Expected a value >= {low:g}, but got {value} instead.",
                                  param=name, code=f"{kind}_below_min_value")
    if high is not None and value > high:
        raise InvalidRequestError(f"Invalid '{name}': {kind} above maximum value. Expected a value <= {high:g}, but got {value} instead.",
                                  param=name, code=f"{kind}_above_max_value")



def _new_messages(messages: Any) -> list[Any]:
    """The messages after the last assistant message: what this request adds to the conversation
    (what came before was checked when it was new)."""
    if not isinstance(messages, list):
        return []
    last = max((index for index, message in enumerate(messages) if isinstance(message, dict) and message.get("role") == "assistant"),
               default=-1)
    return [message for message in messages[last + 1:] if isinstance(message, dict)]


async def _refused(impl: InferenceRouter, body: dict[str, Any], refusal: str) -> Response:
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


async def _sse_response(request: Request, chunks: AsyncIterator[bytes]) -> Response:
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
    return EventStreamResponse(_frames(first, iterator, getattr(request.app.state, "draining", None)), flush_after=2)


async def _frames(first: bytes | None, rest: AsyncIterator[bytes], draining: Draining | None) -> AsyncIterator[bytes]:
    if first is None:
        yield sse_frame(DONE)
        return
    yield sse_frame(first)
    # Registered for the shutdown's interruption: the task waiting for a chunk is the response's own
    # for the head of the stream, then its producer's (runtime.sse), so it is noted at each wait.
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


def _json_or_gone(body: bytes | None) -> Response:
    # 499 (client closed request) is never seen by the client; it is what the server logs show.
    return Response(status_code=499) if body is None else Response(body, media_type=JSON)


def _metadata_filter(request: Request) -> dict[str, str]:
    # The SDK sends `metadata={"k": "v"}` as the query parameter `metadata[k]=v`.
    return {key[9:-1]: value for key, value in request.query_params.items() if key.startswith("metadata[") and key.endswith("]")}


def _store_messages(completion_id: str, messages: list[Any]) -> list[dict[str, Any]]:
    shaped = []
    for index, message in enumerate(messages):
        if not isinstance(message, dict):  # stored before messages were checked: shown as the text it was
            message = {"role": "user", "content": message if isinstance(message, str) else json.dumps(message)}
        content = message.get("content")
        parts = content if isinstance(content, list) else None
        text = content if isinstance(content, str) else None
        if parts is not None:
            text = "".join(part.get("text", "") for part in parts if isinstance(part, dict) and part.get("type") == "text") or None
        shaped.append({**message, "id": f"{completion_id}-{index}", "content": text, "content_parts": parts})
    return shaped


def _page_in_memory(items: list[dict[str, Any]], after: str | None, limit: int, order: str) -> dict[str, Any]:
    ordered = items if order == "asc" else items[::-1]
    if after is not None:
        ids = [item["id"] for item in ordered]
        if after not in ids:
            raise InvalidRequestError(f"Invalid 'after': no message with id '{after}'.", param="after", code="invalid_value")
        ordered = ordered[ids.index(after) + 1:]
    return cursor_page(ordered[:limit], len(ordered) > limit)

