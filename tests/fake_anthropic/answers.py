"""The fake Anthropic upstream's answers: pure, deterministic functions of the request body.

Directives in the last user text drive them: [tool:NAME {json}] calls a tool the request offers,
[thinking] (or thinking on in the request) starts with a signed thinking block, [redacted] adds a
redacted_thinking block, [tokens:N] answers N words, [refusal] stops with `refusal`,
[error:STATUS] answers that error (429 with `retry-after: 7`, 529 `overloaded_error`), and
[stream_error] sends an `error` event after the stream's start. After tool results the answer says
what they held. A forced tool (tool_choice `tool`, or `any` with no directive) is called with an
input shaped by its schema."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

from fake_anthropic.checks import WireError, sealed, sign

JSON = dict[str, Any]

DEFAULT_TEXT = "Hello from the fake Anthropic upstream."
THINKING_TEXT = "Let me think about this carefully."
RETRY_AFTER_S = "7"
CACHE_READ, CACHE_WRITE = 10, 2
_TOOL = re.compile(r"\[tool:([A-Za-z0-9_\-]+)\s*(\{.*?\})?\]")
_TOKENS = re.compile(r"\[tokens:(\d+)\]")
_ERROR = re.compile(r"\[error:(\d{3})\]")
_PLACEHOLDERS: JSON = {"string": "text", "integer": 1, "number": 1.5, "boolean": True, "array": [], "object": {}}


@dataclass
class Plan:
    id: str
    model: str
    blocks: list[JSON]
    stop_reason: str
    usage: JSON
    stream_error: bool = False
    words: list[str] = field(default_factory=list)


def _texts(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content]
    texts = []
    for block in content or ():
        if block.get("type") == "text":
            texts.append(str(block.get("text")))
        elif block.get("type") == "tool_result":
            inner = block.get("content")
            texts += [inner] if isinstance(inner, str) else [str(part.get("text")) for part in inner or () if part.get("type") == "text"]
    return texts


def _directive_text(messages: list[JSON]) -> str:
    for message in reversed(messages):
        if message["role"] == "user":
            content = message["content"]
            texts = [content] if isinstance(content, str) else [b["text"] for b in content if b.get("type") == "text"]
            if texts:
                return " ".join(texts)
    return ""


def _tool_results(message: JSON) -> list[str]:
    content = message.get("content")
    return _texts([b for b in content if b.get("type") == "tool_result"]) if isinstance(content, list) else []


def _placeholder(schema: JSON) -> Any:
    if schema.get("type") == "object" or "properties" in schema:
        properties = schema.get("properties") or {}
        return {name: _placeholder(properties[name]) for name in schema.get("required") or properties}
    return _PLACEHOLDERS.get(str(schema.get("type")), "text")


def plan_message(body: JSON, raw: bytes) -> Plan:
    text = _directive_text(body["messages"])
    error = _ERROR.search(text)
    if error:
        status = int(error.group(1))
        raise WireError(status, "Overloaded" if status == 529 else f"fake anthropic error {status}",
                        {"retry-after": RETRY_AFTER_S} if status in (429, 529) else None)
    thinking_on = (body.get("thinking") or {}).get("type") in ("enabled", "adaptive") or "[thinking]" in text
    blocks: list[JSON] = []
    digest = hashlib.sha256(raw).hexdigest()
    if thinking_on:
        thought = f"{THINKING_TEXT} ({digest[:8]})"
        blocks.append({"type": "thinking", "thinking": thought, "signature": sign(thought)})
    if "[redacted]" in text:
        blocks.append({"type": "redacted_thinking", "data": sealed(digest)})
    calls = _calls(body, text)
    for number, (name, arguments) in enumerate(calls):
        blocks.append({"type": "tool_use", "id": f"toolu_{digest[:20]}{number}", "name": name, "input": arguments})
    words: list[str] = []
    stop = "tool_use" if calls else "end_turn"
    if not calls:
        answer = _answer(body["messages"], text)
        words = answer.split(" ")
        if len(words) > body["max_tokens"]:
            words, stop = words[:body["max_tokens"]], "max_tokens"
        blocks.append({"type": "text", "text": " ".join(words)})
        stop = "refusal" if "[refusal]" in text else stop
    return Plan(f"msg_{digest[:24]}", body["model"], blocks, stop, _usage(body, blocks), "[stream_error]" in text, words)


def _calls(body: JSON, text: str) -> list[tuple[str, JSON]]:
    tools = {tool["name"]: tool for tool in body.get("tools") or ()}
    choice = body.get("tool_choice") or {}
    if choice.get("type") == "tool":
        return [(choice["name"], _placeholder(tools[choice["name"]].get("input_schema") or {}))]
    last = list(tools.values())[-1] if tools else None
    forced = [(last["name"], _placeholder(last.get("input_schema") or {}))] if last is not None and choice.get("type") == "any" else []
    if _tool_results(body["messages"][-1]):
        return forced
    asked = [(match.group(1), json.loads(match.group(2) or "{}")) for match in _TOOL.finditer(text) if match.group(1) in tools]
    return asked or forced


def _answer(messages: list[JSON], text: str) -> str:
    results = _tool_results(messages[-1])
    if results:
        return "The tool said: " + " ".join(results)
    tokens = _TOKENS.search(text)
    if tokens:
        return " ".join(f"word{index}" for index in range(int(tokens.group(1))))
    return DEFAULT_TEXT


def _usage(body: JSON, blocks: list[JSON]) -> JSON:
    system = body.get("system")
    texts = _texts(system if isinstance(system, list) else [{"type": "text", "text": system or ""}])
    texts += [text for message in body["messages"] for text in _texts(message["content"])]
    output = sum(len(str(block.get("text") or block.get("thinking") or json.dumps(block.get("input") or "")).split()) for block in blocks)
    cached = "cache_control" in json.dumps(body)
    return {"input_tokens": sum(len(text.split()) for text in texts), "output_tokens": output,
            "cache_read_input_tokens": CACHE_READ if cached else 0, "cache_creation_input_tokens": CACHE_WRITE if cached else 0}


def render_message(plan: Plan) -> JSON:
    return {"id": plan.id, "type": "message", "role": "assistant", "model": plan.model, "content": plan.blocks,
            "stop_reason": plan.stop_reason, "stop_sequence": None, "usage": plan.usage}


def sse(event: JSON) -> bytes:
    return f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()


def render_events(plan: Plan) -> list[bytes]:
    start = {**render_message(plan), "content": [], "stop_reason": None, "usage": {**plan.usage, "output_tokens": 1}}
    events = [{"type": "message_start", "message": start}, {"type": "ping"}]
    if plan.stream_error:
        return [sse(event) for event in events] + [sse({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})]
    for index, block in enumerate(plan.blocks):
        events += _block_events(index, block)
    events += [{"type": "message_delta", "delta": {"stop_reason": plan.stop_reason, "stop_sequence": None},
                "usage": {"output_tokens": plan.usage["output_tokens"]}}, {"type": "message_stop"}]
    return [sse(event) for event in events]


def _block_events(index: int, block: JSON) -> list[JSON]:
    kind = block["type"]
    if kind == "redacted_thinking":
        return [{"type": "content_block_start", "index": index, "content_block": block}, {"type": "content_block_stop", "index": index}]
    empty = {"text": {"type": "text", "text": ""}, "thinking": {"type": "thinking", "thinking": "", "signature": ""},
             "tool_use": {**block, "input": {}}}[kind]
    deltas: list[JSON]
    if kind == "text":
        deltas = [{"type": "text_delta", "text": piece} for piece in re.findall(r"\s*\S+", block["text"])]
    elif kind == "thinking":
        deltas = [{"type": "thinking_delta", "thinking": piece} for piece in re.findall(r"\s*\S+", block["thinking"])]
        deltas.append({"type": "signature_delta", "signature": block["signature"]})
    else:
        arguments = json.dumps(block["input"])
        half = len(arguments) // 2
        deltas = [{"type": "input_json_delta", "partial_json": part} for part in (arguments[:half], arguments[half:]) if part]
    return [{"type": "content_block_start", "index": index, "content_block": empty},
            *({"type": "content_block_delta", "index": index, "delta": delta} for delta in deltas),
            {"type": "content_block_stop", "index": index}]
