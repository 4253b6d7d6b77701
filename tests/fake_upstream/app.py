"""The fake OpenAI-compatible upstream: a Starlette app over pure, deterministic answer functions.

A chat answer is driven by [directives] in the last user message (see `parse_directives`). The same
request body always gets the same answer: ids derive from a hash of the body and `created` is fixed.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import logging
import math
import re
import struct
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

JSON = dict[str, Any]

CREATED = 1_700_000_000
CHAT_MODEL = "fake-model"
REASONER_MODEL = "fake-reasoner"
EMBED_MODEL = "fake-embed"
CHAT_MODELS = frozenset({CHAT_MODEL, REASONER_MODEL})
EMBED_MODELS = frozenset({EMBED_MODEL})
MODEL_IDS = (CHAT_MODEL, REASONER_MODEL, EMBED_MODEL)

DEFAULT_TEXT = "Hello from the fake upstream."
REASONING_TEXT = "Thinking about it."
REFUSAL_TEXT = "I can't help with that."
MAX_CONTEXT_CHARS = 20_000
CONTEXT_LENGTH_MESSAGE = (
    "This model's maximum context length is 1000 tokens. However, your messages resulted in more "
    "tokens. Please reduce the length of the messages."
)
DEFAULT_DIMENSIONS = 8
LOGPROB = -0.1
RETRY_AFTER_S = "7"

_JSON_TYPE = "application/json"
_SSE_TYPE = "text/event-stream"
_DONE = b"data: [DONE]\n\n"
_SSE_HEADERS = {"cache-control": "no-cache"}
CACHE_ENTRIES = 1024
CACHE_MAX_BODY = 64 * 1024
CACHE_MAX_REPLY = 32 * 1024
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    409: "conflict_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
}
_TOKEN_PIECE = re.compile(r"\s*\S+")
_DIRECTIVE_START = re.compile(r"\[(tokens|tool|fix|error|slow|cut|context_overflow|reasoning|refusal|again|garbage|misshapen|answer)")
_NUMBER_ARG = re.compile(r":(\d+)\]")
_TOOL_NAME = re.compile(r":([A-Za-z0-9_.\-]+)\s*")
_CLOSE = re.compile(r"\s*\]")
_DECODER = json.JSONDecoder()
_ENCODER = json.JSONEncoder(separators=(",", ":"))


def dumps(value: Any) -> bytes:
    """Compact JSON bytes."""
    return _ENCODER.encode(value).encode()


def loads(raw: bytes) -> Any:
    """Parse a UTF-8 JSON body; ValueError when it is not one."""
    return _DECODER.decode(raw.decode())


# ---------------------------------------------------------------------------------------------
# Errors


class UpstreamError(Exception):
    """An OpenAI-shaped error answer."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str | None = None,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type or error_type(status)
        self.param = param
        self.code = code
        self.headers = headers or {}

    def body(self) -> JSON:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def error_type(status: int) -> str:
    """The OpenAI error type for an HTTP status."""
    return "server_error" if status >= 500 else _ERROR_TYPES.get(status, "invalid_request_error")


def status_error(status: int) -> UpstreamError:
    """The answer to an `[error:STATUS]` directive."""
    headers = {"retry-after": RETRY_AFTER_S} if status == 429 else None
    return UpstreamError(status, f"fake upstream error {status}", headers=headers)


# Images a vision model server cannot take, answered as vLLM words it (a 500 for a URL it cannot
# fetch, a 400 for bytes that are no image), never with OpenAI's codes.
UNREACHABLE_IMAGE_HOST = "unreachable.invalid"
_IMAGE_MAGIC = (b"\x89PNG", b"\xff\xd8\xff", b"GIF8", b"RIFF")


def image_error(messages: list[Any]) -> UpstreamError | None:
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        for part in content if isinstance(content, list) else ():
            url = (part.get("image_url") or {}).get("url") if isinstance(part, dict) and part.get("type") == "image_url" else None
            if not isinstance(url, str):
                continue
            if UNREACHABLE_IMAGE_HOST in url:
                return UpstreamError(500, f"Failed to fetch image from {url}: Cannot connect to host {UNREACHABLE_IMAGE_HOST}:443",
                                     type="InternalServerError", code=None)
            if url.startswith("data:") and ";base64," in url:
                try:
                    data = base64.b64decode(url.split(",", 1)[1], validate=False)
                except ValueError:
                    continue
                if data and not data.startswith(_IMAGE_MAGIC):
                    return UpstreamError(400, "cannot identify image file <_io.BytesIO object at 0x7f3a2c1d5e40>", type="BadRequestError",
                                         code=None)
    return None


def context_overflow_error() -> UpstreamError:
    return UpstreamError(400, CONTEXT_LENGTH_MESSAGE, param="messages", code="context_length_exceeded")


def model_not_found(model: object) -> UpstreamError:
    return UpstreamError(
        404,
        f"The model `{model}` does not exist",
        type="invalid_request_error",
        param="model",
        code="model_not_found",
    )


def missing_parameter(name: str) -> UpstreamError:
    return UpstreamError(
        400, f"Missing required parameter: '{name}'.", param=name, code="missing_required_parameter"
    )


def invalid_value(name: str, message: str) -> UpstreamError:
    return UpstreamError(400, message, param=name, code="invalid_value")


def check_model(model: object, wanted: frozenset[str], kind: str) -> str:
    """The model id, if it is one of `wanted`; 404 when unknown, 400 when of the wrong kind."""
    if not isinstance(model, str) or model not in MODEL_IDS:
        raise model_not_found(model)
    if model not in wanted:
        raise invalid_value("model", f"The model `{model}` is not a {kind} model")
    return model


# ---------------------------------------------------------------------------------------------
# Directives


@dataclass(frozen=True, slots=True)
class ToolRequest:
    name: str
    arguments: str


@dataclass(slots=True)
class Directives:
    """What the bracketed directives of a message ask for; `text` is the message without them."""

    text: str
    tokens: int | None = None
    tools: list[ToolRequest] = field(default_factory=list)
    error: int | None = None
    slow_ms: int = 0
    cut: int | None = None
    context_overflow: bool = False
    reasoning: bool = False
    refusal: bool = False
    again: bool = False
    """Call the [tool:...] tools again after their results (a model that never stops calling)."""
    garbage: bool = False
    """Answer with a body cut off mid-JSON, or a stream whose second event is not JSON."""
    misshapen: bool = False
    """Answer with valid JSON of the wrong shape: the content a number, not text (a server's bug)."""
    answer: str | None = None
    """What to answer once the tools have answered (instead of echoing their result)."""
    fixes: list[ToolRequest] = field(default_factory=list)
    """The calls to make once, after tool results (a model correcting a call it was told was wrong)."""


def parse_directives(text: str) -> Directives:
    """Split `text` into its directives and the remaining text (stripped).

    Known: [tokens:N] [tool:NAME {json}] [fix:NAME {json}] [error:STATUS] [slow:MS] [cut:N] [context_overflow]
    [reasoning] [refusal] [again] [garbage] [misshapen] [answer {"text": ...}]. Anything malformed stays in
    the text verbatim.
    """
    if "[" not in text:
        return Directives(text.strip())
    directives = Directives("")
    kept: list[str] = []
    pos = 0
    while (match := _DIRECTIVE_START.search(text, pos)) is not None:
        end = _apply_directive(directives, match.group(1), text, match.end())
        if end is None:
            kept.append(text[pos : match.start() + 1])
            pos = match.start() + 1
        else:
            kept.append(text[pos : match.start()])
            pos = end
    kept.append(text[pos:])
    directives.text = "".join(kept).strip()
    return directives


def _apply_directive(directives: Directives, name: str, text: str, pos: int) -> int | None:
    """Record directive `name` whose arguments start at `pos`; its end, or None when malformed."""
    if name in ("tool", "fix"):
        return _apply_tool(directives.tools if name == "tool" else directives.fixes, text, pos)
    if name == "answer":
        return _apply_answer(directives, text, pos)
    if name in ("context_overflow", "reasoning", "refusal", "again", "garbage", "misshapen"):
        if not text.startswith("]", pos):
            return None
        setattr(directives, name, True)
        return pos + 1
    number = _NUMBER_ARG.match(text, pos)
    if number is None:
        return None
    value = int(number.group(1))
    if name == "tokens":
        directives.tokens = value
    elif name == "slow":
        directives.slow_ms = value
    elif name == "cut":
        directives.cut = value
    elif 400 <= value <= 599:
        directives.error = value
    else:
        return None
    return number.end()


def _apply_answer(directives: Directives, text: str, pos: int) -> int | None:
    start = len(text) - len(text[pos:].lstrip())
    try:
        value, end = _DECODER.raw_decode(text, start)
    except ValueError:
        return None
    close = _CLOSE.match(text, end)
    if not isinstance(value, dict) or not isinstance(value.get("text"), str) or close is None:
        return None
    directives.answer = value["text"]
    return close.end()


def _apply_tool(requests: list[ToolRequest], text: str, pos: int) -> int | None:
    name = _TOOL_NAME.match(text, pos)
    if name is None:
        return None
    pos = name.end()
    arguments = "{}"
    if text.startswith("{", pos):
        try:
            value, end = _DECODER.raw_decode(text, pos)
        except ValueError:
            return None
        if not isinstance(value, dict):
            return None
        arguments, pos = text[pos:end], end
    close = _CLOSE.match(text, pos)
    if close is None:
        return None
    requests.append(ToolRequest(name.group(1), arguments))
    return close.end()


# ---------------------------------------------------------------------------------------------
# Chat completions: planning


def message_text(message: object) -> str:
    """The text of a message: its content string, or its text parts concatenated."""
    if not isinstance(message, dict):
        return ""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            part["text"] for part in content if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
    return ""


def token_pieces(text: str) -> list[str]:
    """Whitespace tokens, each with the whitespace before it, so that they join back to `text`."""
    return _TOKEN_PIECE.findall(text)


def count_tokens(text: str) -> int:
    return len(text.split())


@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    name: str
    arguments: str

    def as_json(self) -> JSON:
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


@dataclass(frozen=True, slots=True)
class ChoicePlan:
    """One choice of the answer: content pieces, or a refusal, or tool calls."""

    index: int
    pieces: list[str]
    content: str | None
    refusal: str | None
    tool_calls: list[ToolCall]
    finish_reason: str

    def completion_tokens(self) -> int:
        if self.tool_calls:
            return sum(count_tokens(call.arguments) + 1 for call in self.tool_calls)
        if self.refusal is not None:
            return count_tokens(self.refusal)
        return len(self.pieces)


@dataclass(frozen=True, slots=True)
class ChatPlan:
    """Everything needed to render one chat completion, streamed or not."""

    id: str
    model: str
    choices: list[ChoicePlan]
    reasoning: str | None
    prompt_tokens: int
    logprobs: bool
    top_logprobs: int
    slow_ms: int
    cut: int | None
    garbage: bool = False
    misshapen: bool = False
    service_tier: str | None = None
    """Answered as OpenAI does when the request names one ("auto" is served at "default")."""

    def usage(self) -> JSON:
        reasoning_tokens = count_tokens(self.reasoning) * len(self.choices) if self.reasoning else 0
        completion = sum(choice.completion_tokens() for choice in self.choices) + reasoning_tokens
        usage: JSON = {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": completion,
            "total_tokens": self.prompt_tokens + completion,
        }
        if reasoning_tokens:
            usage["completion_tokens_details"] = {"reasoning_tokens": reasoning_tokens}
        return usage


def request_digest(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()


def plan_chat(body: object, digest: str) -> ChatPlan:
    """The answer to a chat completion request body; raises UpstreamError for error answers."""
    if not isinstance(body, dict):
        raise invalid_value("body", "The request body must be a JSON object")
    model = check_model(body.get("model"), CHAT_MODELS, "chat")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise missing_parameter("messages")
    texts = [message_text(message) for message in messages]
    directives = parse_directives(_last_user_text(messages, texts))
    if directives.error is not None:
        raise status_error(directives.error)
    image_failure = image_error(messages)
    if image_failure is not None:
        raise image_failure
    if directives.context_overflow or sum(map(len, texts)) > MAX_CONTEXT_CHARS:
        raise context_overflow_error()
    last = messages[-1]
    tool_result = texts[-1] if isinstance(last, dict) and last.get("role") == "tool" else None
    reasoning = directives.reasoning or model == REASONER_MODEL
    return ChatPlan(
        id=f"chatcmpl-{digest[:29]}",
        model=model,
        choices=[_plan_choice(body, directives, tool_result, digest, i, _fixed(messages, directives.fixes)) for i in range(_choice_count(body))],
        reasoning=REASONING_TEXT if reasoning else None,
        prompt_tokens=sum(count_tokens(text) for text in texts),
        logprobs=body.get("logprobs") is True,
        top_logprobs=_int_field(body, "top_logprobs") or 0,
        slow_ms=directives.slow_ms,
        cut=directives.cut,
        garbage=directives.garbage,
        misshapen=directives.misshapen,
        service_tier=_served_tier(body.get("service_tier")),
    )


def _served_tier(asked: object) -> str | None:
    if asked is None:
        return None
    if asked not in ("auto", "default", "flex", "scale", "priority"):
        raise invalid_value("service_tier", f"Invalid value: {asked!r}. Supported values are: 'auto', 'default', 'flex', 'scale' and 'priority'.")
    return "default" if asked == "auto" else str(asked)


def _last_user_text(messages: list[Any], texts: list[str]) -> str:
    for message, text in zip(reversed(messages), reversed(texts)):
        if isinstance(message, dict) and message.get("role") == "user":
            return text
    return ""


def _int_field(body: JSON, name: str) -> int | None:
    value = body.get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _choice_count(body: JSON) -> int:
    n = _int_field(body, "n")
    return 1 if n is None else max(n, 1)


def base_text(directives: Directives, tool_result: str | None) -> str:
    """The answer text before per-request shaping (choices, json format, stop, max tokens)."""
    if tool_result is not None:
        return directives.answer if directives.answer is not None else f"Tool result: {tool_result}"
    if directives.answer is not None and not directives.tools:  # no tool to wait for: the answer at once
        return directives.answer
    if directives.tokens is not None:
        return " ".join(f"tok{i}" for i in range(1, directives.tokens + 1))
    return f"You said: {directives.text}" if directives.text else DEFAULT_TEXT


def _fixed(messages: list[Any], fixes: Sequence[ToolRequest]) -> bool:
    """Whether the assistant made the [fix:...] calls since the last user message."""
    wanted = {(fix.name, fix.arguments) for fix in fixes}
    for message in reversed(messages):
        if not isinstance(message, dict) or message.get("role") == "user":
            return False
        for call in message.get("tool_calls") or () if message.get("role") == "assistant" else ():
            function = call.get("function") or {} if isinstance(call, dict) else {}
            if (function.get("name"), function.get("arguments")) in wanted:
                return True
    return False


def _plan_choice(
    body: JSON, directives: Directives, tool_result: str | None, digest: str, index: int, fixed: bool = False
) -> ChoicePlan:
    fixing = tool_result is not None and directives.fixes and not fixed
    if ((tool_result is None or directives.again) and directives.tools or fixing) and body.get("tools"):
        calls = [
            ToolCall(_tool_call_id(digest, index, k), tool.name, tool.arguments)
            for k, tool in enumerate(directives.fixes if fixing else directives.tools)
        ]
        return ChoicePlan(index, [], None, None, calls, "tool_calls")
    if tool_result is None and directives.refusal:
        return ChoicePlan(index, [], None, REFUSAL_TEXT, [], "stop")
    text = base_text(directives, tool_result) + (f" (choice {index})" if index else "")
    if _wants_json(body) and not _json_object(text):
        text = json.dumps({"answer": text})
    pieces, finish_reason = shape_content(text, _stops(body), _max_tokens(body))
    return ChoicePlan(index, pieces, "".join(pieces), None, [], finish_reason)


def _tool_call_id(digest: str, choice: int, call: int) -> str:
    return "call_" + hashlib.sha256(f"{digest}:{choice}:{call}".encode()).hexdigest()[:24]


def _json_object(text: str) -> bool:
    """Whether `text` is already a JSON object (an [answer] written as the format asks)."""
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False


def _wants_json(body: JSON) -> bool:
    response_format = body.get("response_format")
    return isinstance(response_format, dict) and response_format.get("type") in ("json_object", "json_schema")


def _stops(body: JSON) -> list[str]:
    stop = body.get("stop")
    if isinstance(stop, str):
        return [stop] if stop else []
    if isinstance(stop, list):
        return [s for s in stop if isinstance(s, str) and s]
    return []


def _max_tokens(body: JSON) -> int | None:
    limit = _int_field(body, "max_completion_tokens")
    return limit if limit is not None else _int_field(body, "max_tokens")


def shape_content(text: str, stops: Sequence[str], max_tokens: int | None) -> tuple[list[str], str]:
    """Cut `text` before the first stop string, then to `max_tokens`; its pieces and finish reason."""
    cuts = [i for i in (text.find(stop) for stop in stops) if i >= 0]
    if cuts:
        text = text[: min(cuts)]
    pieces = token_pieces(text)
    if max_tokens is not None and len(pieces) > max_tokens:
        return pieces[: max(max_tokens, 0)], "length"
    return pieces, "stop"


# ---------------------------------------------------------------------------------------------
# Chat completions: rendering


def logprob_entry(token: str, top: int) -> JSON:
    """A ChatCompletionTokenLogprob for `token` with `top` alternatives (the token itself first)."""
    alternatives = [{"token": token, "logprob": LOGPROB, "bytes": list(token.encode())}]
    alternatives += [
        {"token": f"alt{k}", "logprob": -1.0 - k, "bytes": list(f"alt{k}".encode())} for k in range(1, top)
    ]
    return {"token": token, "logprob": LOGPROB, "bytes": list(token.encode()), "top_logprobs": alternatives[:top]}


def render_completion(plan: ChatPlan) -> JSON:
    """The non-stream ChatCompletion body."""
    return {
        "id": plan.id,
        "object": "chat.completion",
        "created": CREATED,
        "model": plan.model,
        "choices": [_render_choice(plan, choice) for choice in plan.choices],
        "usage": plan.usage(),
        "system_fingerprint": "fp_fake",
        **_tier(plan),
    }


def _tier(plan: ChatPlan) -> JSON:
    return {} if plan.service_tier is None else {"service_tier": plan.service_tier}


def _render_choice(plan: ChatPlan, choice: ChoicePlan) -> JSON:
    message: JSON = {"role": "assistant", "content": choice.content, "refusal": choice.refusal}
    if choice.tool_calls:
        message["tool_calls"] = [call.as_json() for call in choice.tool_calls]
    if plan.reasoning is not None:
        message["reasoning_content"] = plan.reasoning
    logprobs: JSON | None = None
    if plan.logprobs:
        entries = [logprob_entry(piece, plan.top_logprobs) for piece in choice.pieces]
        logprobs = {"content": entries if choice.content is not None else None, "refusal": None}
    return {"index": choice.index, "message": message, "logprobs": logprobs, "finish_reason": choice.finish_reason}


def render_chunks(plan: ChatPlan, include_usage: bool) -> list[JSON]:
    """The ChatCompletionChunk bodies of the streamed answer, in order ([DONE] not included)."""
    chunks: list[JSON] = []
    for choice in plan.choices:
        chunks.extend(_chunk(plan, choice.index, delta, logprobs) for delta, logprobs in _deltas(plan, choice))
        chunks.append(_chunk(plan, choice.index, {}, None, choice.finish_reason))
    if include_usage:
        chunks.append(
            {
                "id": plan.id,
                "object": "chat.completion.chunk",
                "created": CREATED,
                "model": plan.model,
                "choices": [],
                "usage": plan.usage(),
                **_tier(plan),
            }
        )
    return chunks


def _chunk(plan: ChatPlan, index: int, delta: JSON, logprobs: JSON | None, finish: str | None = None) -> JSON:
    return {
        "id": plan.id,
        "object": "chat.completion.chunk",
        "created": CREATED,
        "model": plan.model,
        "choices": [{"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish}],
        **_tier(plan),
    }


def _deltas(plan: ChatPlan, choice: ChoicePlan) -> list[tuple[JSON, JSON | None]]:
    """(delta, logprobs) for each content-bearing chunk of one choice, role chunk first."""
    deltas: list[tuple[JSON, JSON | None]] = [({"role": "assistant", "content": ""}, None)]
    if plan.reasoning is not None:
        deltas += [({"reasoning_content": piece}, None) for piece in token_pieces(plan.reasoning)]
    if choice.tool_calls:
        for index, call in enumerate(choice.tool_calls):
            deltas += [(delta, None) for delta in tool_call_deltas(index, call)]
    elif choice.refusal is not None:
        deltas += [({"refusal": piece}, None) for piece in token_pieces(choice.refusal)]
    else:
        for piece in choice.pieces:
            logprobs = None
            if plan.logprobs:
                logprobs = {"content": [logprob_entry(piece, plan.top_logprobs)], "refusal": None}
            deltas.append(({"content": piece}, logprobs))
    return deltas


def tool_call_deltas(index: int, call: ToolCall) -> list[JSON]:
    """A header delta (id, type, name, empty arguments), then the arguments in 2-3 pieces."""
    header = {"index": index, "id": call.id, "type": "function", "function": {"name": call.name, "arguments": ""}}
    deltas = [{"tool_calls": [header]}]
    for piece in split_arguments(call.arguments):
        deltas.append({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    return deltas


def split_arguments(arguments: str) -> list[str]:
    """`arguments` in three roughly equal non-empty pieces (two for very short ones)."""
    size = len(arguments)
    cuts = [0, size // 3, 2 * size // 3, size]
    return [arguments[a:b] for a, b in zip(cuts, cuts[1:]) if b > a]


def sse_event(chunk: JSON) -> bytes:
    return b"data: " + dumps(chunk) + b"\n\n"


# ---------------------------------------------------------------------------------------------
# Embeddings


def embedding_vector(item: str | list[int], dimensions: int) -> list[float]:
    """A deterministic unit vector (float32 values) derived from sha256 of `item`."""
    seed = item.encode() if isinstance(item, str) else dumps(item)
    raw = b"".join(
        hashlib.sha256(seed + counter.to_bytes(4, "little")).digest() for counter in range((dimensions + 7) // 8)
    )
    values = [n / 2**31 - 1.0 for n in struct.unpack(f"<{dimensions}I", raw[: 4 * dimensions])]
    norm = math.sqrt(sum(v * v for v in values)) or 1.0
    packed = struct.pack(f"<{dimensions}f", *(v / norm for v in values))
    return list(struct.unpack(f"<{dimensions}f", packed))


def embedding_inputs(value: object) -> list[str | list[int]]:
    """The inputs of an embeddings request: a string, strings, a token array, or token arrays."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value:
        if _is_token_array(value):
            return [value]
        if all(isinstance(v, str) or _is_token_array(v) for v in value):
            return list(value)
    if value is None:
        raise missing_parameter("input")
    raise invalid_value("input", "'input' must be a string, an array of strings, or token arrays")


def _is_token_array(value: object) -> bool:
    return isinstance(value, list) and bool(value) and all(type(v) is int for v in value)


def render_embeddings(body: object) -> JSON:
    """The CreateEmbeddingResponse body for an embeddings request body."""
    if not isinstance(body, dict):
        raise invalid_value("body", "The request body must be a JSON object")
    model = check_model(body.get("model"), EMBED_MODELS, "embedding")
    inputs = embedding_inputs(body.get("input"))
    for item in inputs:  # `[error:STATUS]` in a text fails the request, as in chat
        failed = re.search(r"\[error:(\d{3})\]", item) if isinstance(item, str) else None
        if failed:
            raise status_error(int(failed.group(1)))
    dimensions = body.get("dimensions", DEFAULT_DIMENSIONS)
    if not isinstance(dimensions, int) or isinstance(dimensions, bool) or not 1 <= dimensions <= 4096:
        raise invalid_value("dimensions", "'dimensions' must be an integer between 1 and 4096")
    encoding = body.get("encoding_format", "float")
    if encoding not in ("float", "base64"):
        raise invalid_value("encoding_format", "'encoding_format' must be 'float' or 'base64'")
    data = [
        {"object": "embedding", "index": i, "embedding": _encode_vector(embedding_vector(item, dimensions), encoding)}
        for i, item in enumerate(inputs)
    ]
    tokens = sum(count_tokens(item) if isinstance(item, str) else len(item) for item in inputs)
    return {"object": "list", "data": data, "model": model, "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}


def _encode_vector(vector: list[float], encoding: str) -> list[float] | str:
    if encoding == "float":
        return vector
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()


# ---------------------------------------------------------------------------------------------
# Models


def model_entry(model: str) -> JSON:
    return {"id": model, "object": "model", "created": CREATED, "owned_by": "fake"}


MODELS_BODY = dumps({"object": "list", "data": [model_entry(model) for model in MODEL_IDS]})
MODEL_BODIES = {model: dumps(model_entry(model)) for model in MODEL_IDS}


# ---------------------------------------------------------------------------------------------
# The ASGI app


@dataclass(slots=True)
class Faults:
    """Faults switched on while tests run, for every request of one fake upstream (not in its
    body's directives, which every upstream would read alike): `status` answers every model call
    with that error (a 429 with `retry_after`), `overflow` with the context window exceeded,
    `hang_s` waits that long before answering."""

    status: int | None = None
    retry_after: str | None = None
    hang_s: float = 0.0
    overflow: bool = False

    def clear(self) -> None:
        self.status, self.retry_after, self.hang_s, self.overflow = None, None, 0.0, False


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """A request the fake received: its path, JSON body (raw text if not JSON) and headers."""

    method: str
    path: str
    body: Any
    headers: dict[str, str]


@dataclass(frozen=True, slots=True)
class Reply:
    """A rendered JSON answer (success or error); `slow_ms` is waited before sending it."""

    status: int
    body: bytes
    headers: dict[str, str] | None = None
    slow_ms: int = 0

    def size(self) -> int:
        return len(self.body)


@dataclass(frozen=True, slots=True)
class StreamReply:
    """A rendered streamed answer: its SSE events, [DONE] included, sent `slow_ms` apart."""

    events: tuple[bytes, ...]
    slow_ms: int = 0
    cut: int | None = None

    def size(self) -> int:
        return sum(map(len, self.events))


def error_reply(error: UpstreamError) -> Reply:
    return Reply(error.status, dumps(error.body()), error.headers or None)


def parse_body(raw: bytes) -> Any:
    try:
        return loads(raw)
    except ValueError:
        raise invalid_value("body", "The request body is not valid JSON") from None


def answer_chat(raw: bytes) -> Reply | StreamReply:
    """The whole answer to a chat completion request body."""
    try:
        body = parse_body(raw)
        plan = plan_chat(body, request_digest(raw))
    except UpstreamError as error:
        return error_reply(error)
    if body.get("stream") is not True:
        completion = render_completion(plan)
        if plan.misshapen:
            completion["choices"][0]["message"]["content"] = 5
        answer = dumps(completion)
        return Reply(200, answer[: len(answer) // 2] if plan.garbage else answer, slow_ms=plan.slow_ms)
    options = body.get("stream_options")
    include_usage = isinstance(options, dict) and options.get("include_usage") is True
    chunks = render_chunks(plan, include_usage)
    if plan.misshapen:
        chunks[1]["choices"][0]["delta"] = {"content": 5}
    events = [sse_event(chunk) for chunk in chunks]
    if plan.garbage:
        events[1] = b"data: {this is not json\n\n"
    events.append(_DONE)
    return StreamReply(tuple(events), plan.slow_ms, plan.cut)


# ---------------------------------------------------------------------------------------------
# Legacy completions (/v1/completions): each prompt answered as a user message would be


TEXT_COMPLETION_MAX_TOKENS = 16  # OpenAI's default `max_tokens` for the legacy API


def completion_prompts(value: object) -> list[str]:
    """The prompts of a completions request as texts (a token prompt reads as its numbers)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value:
        if _is_token_array(value):
            return [" ".join(map(str, value))]
        if all(isinstance(v, str) for v in value):
            return list(value)
        if all(_is_token_array(v) for v in value):
            return [" ".join(map(str, v)) for v in value]
    if value is None:
        raise missing_parameter("prompt")
    raise invalid_value("prompt", "'prompt' must be a string, an array of strings, or token arrays")


def render_text_completion(body: object, digest: str) -> tuple[JSON, list[JSON], Directives]:
    """The Completion body, its stream's chunks (usage not included), and the first prompt's directives."""
    if not isinstance(body, dict):
        raise invalid_value("body", "The request body must be a JSON object")
    model = check_model(body.get("model"), CHAT_MODELS, "chat")
    prompts = completion_prompts(body.get("prompt"))
    n = _choice_count(body)
    limit = _int_field(body, "max_tokens")
    head = {"id": f"cmpl-{digest[:29]}", "object": "text_completion", "created": CREATED, "model": model}
    choices: list[JSON] = []
    chunks: list[JSON] = []
    completion_tokens = 0
    first = parse_directives(prompts[0])
    for number, prompt in enumerate(prompts):
        directives = parse_directives(prompt)
        if directives.error is not None:
            raise status_error(directives.error)
        for choice in range(n):
            index = number * n + choice
            text = base_text(directives, None) + (f" (choice {choice})" if choice else "")
            pieces, finish = shape_content(text, _stops(body), TEXT_COMPLETION_MAX_TOKENS if limit is None else limit)
            completion_tokens += len(pieces)
            if body.get("echo") is True:
                pieces = [prompt, *pieces]
            choices.append({"text": "".join(pieces), "index": index, "logprobs": None, "finish_reason": finish})
            chunks += [{**head, "choices": [{"text": piece, "index": index, "logprobs": None, "finish_reason": None}]} for piece in pieces]
            chunks.append({**head, "choices": [{"text": "", "index": index, "logprobs": None, "finish_reason": finish}]})
    prompt_tokens = sum(count_tokens(prompt) for prompt in prompts)
    usage = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens, "total_tokens": prompt_tokens + completion_tokens}
    return {**head, "choices": choices, "usage": usage, "system_fingerprint": "fp_fake"}, chunks, first


def answer_text_completion(raw: bytes) -> Reply | StreamReply:
    """The whole answer to a legacy completions request body."""
    try:
        body = parse_body(raw)
        completion, chunks, directives = render_text_completion(body, request_digest(raw))
    except UpstreamError as error:
        return error_reply(error)
    if body.get("stream") is not True:
        return Reply(200, dumps(completion), slow_ms=directives.slow_ms)
    options = body.get("stream_options")
    if isinstance(options, dict) and options.get("include_usage") is True:
        chunks.append({**{key: completion[key] for key in ("id", "object", "created", "model")}, "choices": [], "usage": completion["usage"]})
    return StreamReply((*map(sse_event, chunks), _DONE), directives.slow_ms, directives.cut)


MODERATION_CATEGORIES = ("harassment", "harassment/threatening", "hate", "hate/threatening", "illicit", "illicit/violent", "self-harm",
                         "self-harm/instructions", "self-harm/intent", "sexual", "sexual/minors", "violence", "violence/graphic")


def answer_moderations(raw: bytes) -> Reply:
    """OpenAI's moderation of each input: a text holding `[flag:CATEGORY]` is flagged for it;
    `[moderation-error:STATUS]` fails the request (and only it: chat ignores the directive)."""
    try:
        body = parse_body(raw)
        value = body.get("input") if isinstance(body, dict) else None
        inputs = [value] if isinstance(value, str) else [value] if isinstance(value, list) and value and isinstance(value[0], dict) else value
        if not isinstance(inputs, list) or not inputs:
            raise missing_parameter("input")
        results = []
        for item in inputs:
            text = item if isinstance(item, str) else " ".join(str(p.get("text", "")) for p in item if isinstance(p, dict))
            failed = re.search(r"\[moderation-error:(\d{3})\]", text)
            if failed:
                raise status_error(int(failed.group(1)))
            flagged = set(re.findall(r"\[flag:([a-z/-]+)\]", text))
            results.append({"flagged": bool(flagged), "categories": {c: c in flagged for c in MODERATION_CATEGORIES},
                            "category_scores": {c: 0.97 if c in flagged else 0.001 for c in MODERATION_CATEGORIES},
                            "category_applied_input_types": {c: ["text"] for c in MODERATION_CATEGORIES}})
        model = body.get("model") or "omni-moderation-latest"
        return Reply(200, dumps({"id": "modr-fake", "model": model, "results": results}))
    except UpstreamError as error:
        return error_reply(error)


def answer_embeddings(raw: bytes) -> Reply:
    """The whole answer to an embeddings request body."""
    try:
        return Reply(200, dumps(render_embeddings(parse_body(raw))))
    except UpstreamError as error:
        return error_reply(error)


class StreamCut(Exception):
    """Raised inside a streamed answer to drop the connection for `[cut:N]`."""


_DELIBERATE = (StreamCut, asyncio.CancelledError)


class _HideDeliberateDrops(logging.Filter):
    """Keeps uvicorn from logging as application errors the connections dropped on purpose:
    by `[cut:N]`, and streams still running when the server is stopped."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, BaseExceptionGroup):
            return not all(isinstance(e, _DELIBERATE) for e in error.exceptions)
        return not isinstance(error, _DELIBERATE)


_HIDE_DELIBERATE_DROPS = _HideDeliberateDrops()


async def stream_events(reply: StreamReply, left: Callable[[], None] = lambda: None) -> AsyncIterator[bytes]:
    """The SSE events, each after `slow_ms`; for `[cut:N]` N events then a dropped connection.
    `left` is called if the client goes away before the last event."""
    delay = reply.slow_ms / 1000
    try:
        for count, event in enumerate(reply.events):
            if reply.cut is not None and count >= reply.cut:
                raise StreamCut(f"stream cut after {reply.cut} chunks")
            if delay:
                await asyncio.sleep(delay)
            yield event
    except (GeneratorExit, asyncio.CancelledError):  # the client went away mid-stream
        left()
        raise
    if reply.cut is not None:
        raise StreamCut(f"stream cut after {reply.cut} chunks")


async def respond(reply: Reply | StreamReply, request: Request | None = None, left: Callable[[], None] = lambda: None) -> Response:
    if isinstance(reply, StreamReply):
        return StreamingResponse(stream_events(reply, left), media_type=_SSE_TYPE, headers=_SSE_HEADERS)
    if reply.slow_ms:
        deadline = asyncio.get_running_loop().time() + reply.slow_ms / 1000
        while (wait := deadline - asyncio.get_running_loop().time()) > 0:
            await asyncio.sleep(min(wait, 0.01))
            if request is not None and await request.is_disconnected():
                left()  # the client gave up waiting: nobody reads the answer
                break
    return Response(reply.body, reply.status, reply.headers, _JSON_TYPE)


class ReplyCache:
    """Answers are pure functions of the request body, so they are rendered once per distinct body."""

    def __init__(self, answer: Callable[[bytes], Reply | StreamReply]) -> None:
        self._answer = answer
        self._replies: dict[bytes, Reply | StreamReply] = {}

    def __call__(self, raw: bytes) -> Reply | StreamReply:
        reply = self._replies.get(raw)
        if reply is None:
            reply = self._answer(raw)
            if len(raw) <= CACHE_MAX_BODY and reply.size() <= CACHE_MAX_REPLY:
                if len(self._replies) >= CACHE_ENTRIES:
                    del self._replies[next(iter(self._replies))]
                self._replies[raw] = reply
        return reply


class FakeUpstreamApp:
    """The endpoints. `recorded`, when given, receives every request; `api_key` makes auth required."""

    def __init__(self, api_key: str | None = None, recorded: list[RecordedRequest] | None = None,
                 abandoned: list[str] | None = None, faults: Faults | None = None) -> None:
        self._faults = faults or Faults()
        self._authorization = f"Bearer {api_key}" if api_key is not None else None
        self._recorded = recorded
        self._abandoned = abandoned
        self._chat = ReplyCache(answer_chat)
        self._text_completions = ReplyCache(answer_text_completion)
        self._embeddings = ReplyCache(answer_embeddings)

    def _admit(self, request: Request, raw: bytes | None) -> Reply | None:
        """Record the request; an error reply when it is not authorized."""
        if self._recorded is not None:
            self._recorded.append(
                RecordedRequest(request.method, request.url.path, _recordable(raw), dict(request.headers))
            )
        if self._authorization is not None and request.headers.get("authorization") != self._authorization:
            return _UNAUTHORIZED
        return None

    async def list_models(self, request: Request) -> Response:
        return await respond(self._admit(request, None) or Reply(200, MODELS_BODY))

    async def get_model(self, request: Request) -> Response:
        model = request.path_params["model"]
        found = Reply(200, MODEL_BODIES[model]) if model in MODEL_BODIES else error_reply(model_not_found(model))
        return await respond(self._admit(request, None) or found)

    async def _faulted(self) -> Reply | None:
        """The switched-on fault's answer, after its hang (None: no fault to answer with)."""
        faults = self._faults
        if faults.hang_s:
            await asyncio.sleep(faults.hang_s)
        if faults.overflow:
            return error_reply(context_overflow_error())
        if faults.status is None:
            return None
        headers = {"retry-after": faults.retry_after} if faults.retry_after is not None else None
        return Reply(faults.status, dumps(UpstreamError(faults.status, f"fake upstream fault {faults.status}").body()), headers)

    async def chat_completions(self, request: Request) -> Response:
        raw = await request.body()
        reply = self._admit(request, raw) or await self._faulted() or self._chat(raw)
        return await respond(reply, request, lambda: self._left(request))

    async def completions(self, request: Request) -> Response:
        raw = await request.body()
        reply = self._admit(request, raw) or await self._faulted() or self._text_completions(raw)
        return await respond(reply, request, lambda: self._left(request))

    def _left(self, request: Request) -> None:
        if self._abandoned is not None:
            self._abandoned.append(request.url.path)

    async def moderations(self, request: Request) -> Response:
        raw = await request.body()
        return await respond(self._admit(request, raw) or answer_moderations(raw))

    async def embeddings(self, request: Request) -> Response:
        raw = await request.body()
        return await respond(self._admit(request, raw) or await self._faulted() or self._embeddings(raw))


def _recordable(raw: bytes | None) -> Any:
    """The JSON value of a body, or its text when it is not JSON."""
    if raw is None:
        return None
    try:
        return loads(raw)
    except ValueError:
        return raw.decode(errors="replace")


_UNAUTHORIZED = error_reply(
    UpstreamError(401, "Incorrect API key provided.", type="authentication_error", code="invalid_api_key")
)


def create_app(api_key: str | None = None, recorded: list[RecordedRequest] | None = None,
               abandoned: list[str] | None = None, faults: Faults | None = None) -> Starlette:
    """The fake upstream as an ASGI app, serving /v1/models, /v1/chat/completions, /v1/completions and /v1/embeddings
    (and taking OTLP traces at /v1/traces).
    `abandoned` receives the path of every answer whose client left before it was whole."""
    logging.getLogger("uvicorn.error").addFilter(_HIDE_DELIBERATE_DROPS)
    handlers = FakeUpstreamApp(api_key, recorded, abandoned, faults)
    return Starlette(
        routes=[
            Route("/v1/chat/completions", handlers.chat_completions, methods=["POST"]),
            Route("/v1/completions", handlers.completions, methods=["POST"]),
            Route("/v1/embeddings", handlers.embeddings, methods=["POST"]),
            Route("/v1/moderations", handlers.moderations, methods=["POST"]),
            Route("/v1/models", handlers.list_models, methods=["GET"]),
            Route("/v1/models/{model:path}", handlers.get_model, methods=["GET"]),
            Route("/v1/traces", _collected_traces, methods=["POST"]),
        ]
    )


async def _collected_traces(request: Request) -> Response:
    """An OTLP/HTTP collector's answer (an empty ExportTraceServiceResponse): the benches point a
    stack's trace exporter here, so exporting costs what it costs against a real collector."""
    await request.body()
    return Response(b"", 200, media_type="application/x-protobuf")
