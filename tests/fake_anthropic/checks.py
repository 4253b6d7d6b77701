"""What the fake Anthropic upstream refuses, as Anthropic does (the rules a translation from chat
completions has to keep): each a `WireError` with Anthropic's status, error type and wording."""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

JSON = dict[str, Any]

MODELS = ("claude-fake-sonnet", "claude-fake-haiku", "claude-fake-opus")
_SECRET = b"fake-anthropic-signing-key"
_THINKING = ("thinking", "redacted_thinking")


class WireError(Exception):
    """An answer in Anthropic's error envelope."""

    TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error", 404: "not_found_error",
             413: "request_too_large", 429: "rate_limit_error", 500: "api_error", 529: "overloaded_error"}

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers or {}

    def body(self) -> JSON:
        return {"type": "error", "error": {"type": self.TYPES.get(self.status, "api_error"), "message": self.message}}


def sign(thinking: str) -> str:
    """The signature the fake gives a thinking block, and checks when the block comes back."""
    return "sig_" + hmac.new(_SECRET, thinking.encode(), hashlib.sha256).hexdigest()[:32]


def sealed(text: str) -> str:
    """A redacted_thinking block's data."""
    return "redacted_" + hmac.new(_SECRET, b"redacted:" + text.encode(), hashlib.sha256).hexdigest()[:32]


def check_request(body: Any) -> None:
    if not isinstance(body, dict):
        raise WireError(400, "The request body is not a JSON object")
    if body.get("model") not in MODELS:
        raise WireError(404, f"model: {body.get('model')}")
    if not isinstance(body.get("max_tokens"), int) or body["max_tokens"] < 1:
        raise WireError(400, "max_tokens: Field required")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise WireError(400, "messages: at least one message is required")
    _check_sampling(body)
    _check_cache(body)
    for index, message in enumerate(messages):
        _check_message(messages, index, message)
    _check_thinking(body)


def _check_sampling(body: JSON) -> None:
    temperature = body.get("temperature")
    if isinstance(temperature, (int, float)) and not 0 <= temperature <= 1:
        raise WireError(400, "temperature: range: 0..1")
    names = {tool.get("name") for tool in body.get("tools") or ()}
    choice = body.get("tool_choice") or {}
    if choice.get("type") == "tool" and choice.get("name") not in names:
        raise WireError(400, f"tool_choice: tool '{choice.get('name')}' not found in tools")


def _check_cache(body: JSON) -> None:
    blocks = [*(body.get("tools") or ()), *(body["system"] if isinstance(body.get("system"), list) else ())]
    blocks += [block for message in body["messages"] if isinstance(message.get("content"), list) for block in message["content"]]
    count = sum(1 for block in blocks if block.get("cache_control"))
    if count > 4:
        raise WireError(400, f"A maximum of 4 blocks with cache_control may be provided. Found {count}.")
    if any(block.get("cache_control") and block.get("type") in _THINKING for block in blocks):
        raise WireError(400, "thinking blocks cannot be marked with cache_control")


def _check_message(messages: list[JSON], index: int, message: JSON) -> None:
    where = f"messages.{index}"
    role = message.get("role")
    if role not in ("user", "assistant"):
        raise WireError(400, f"{where}.role: Input should be 'user' or 'assistant'")
    if index == 0 and role != "user":
        raise WireError(400, "messages: first message must use the \"user\" role")
    if index > 0 and messages[index - 1].get("role") == role:
        raise WireError(400, "messages: roles must alternate between \"user\" and \"assistant\"")
    content = message.get("content")
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
    if not isinstance(blocks, list) or not blocks:
        raise WireError(400, f"{where}: all messages must have non-empty content")
    for position, block in enumerate(blocks):
        if block.get("type") == "text" and not block.get("text"):
            raise WireError(400, f"{where}.content.{position}.text: text content blocks must be non-empty")
        if block.get("type") == "thinking" and block.get("signature") != sign(str(block.get("thinking"))):
            raise WireError(400, f"{where}.content.{position}: Invalid `signature` in `thinking` block")
        if block.get("type") == "redacted_thinking" and not str(block.get("data")).startswith("redacted_"):
            raise WireError(400, f"{where}.content.{position}: Invalid `data` in `redacted_thinking` block")
    if role == "user":
        _check_tool_results(messages, index, blocks)


def _check_tool_results(messages: list[JSON], index: int, blocks: list[JSON]) -> None:
    results = [block for block in blocks if block.get("type") == "tool_result"]
    if not results:
        return
    if any(block.get("type") != "tool_result" for block in blocks[:len(results)]):
        raise WireError(400, f"messages.{index}: tool_result blocks must come first in the user message")
    previous = messages[index - 1].get("content") if index > 0 else None
    calls = {block.get("id") for block in previous if block.get("type") == "tool_use"} if isinstance(previous, list) else set()
    for block in results:
        if block.get("tool_use_id") not in calls:
            raise WireError(400, f"messages.{index}.content: unexpected `tool_use_id` found in `tool_result` blocks: "
                                 f"{block.get('tool_use_id')}. Each `tool_result` block must have a corresponding `tool_use` "
                                 "block in the previous message.")


def _check_thinking(body: JSON) -> None:
    thinking = body.get("thinking") or {}
    if thinking.get("type") not in ("enabled", "adaptive"):
        assistants = [index for index, message in enumerate(body["messages"]) if message["role"] == "assistant"]
        content = body["messages"][assistants[-1]]["content"] if assistants else None
        if isinstance(content, list) and any(block.get("type") in _THINKING for block in content):
            raise WireError(400, f"messages.{assistants[-1]}.content.0: When thinking is disabled, an `assistant` message in the final "
                                 "position cannot contain `thinking`. To use thinking blocks, enable `thinking` in your request.")
        return
    if thinking.get("type") == "enabled":
        budget = thinking.get("budget_tokens")
        if not isinstance(budget, int) or budget < 1024:
            raise WireError(400, "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024")
        if budget >= body["max_tokens"]:
            raise WireError(400, "`max_tokens` must be greater than `thinking.budget_tokens`")
    if (body.get("tool_choice") or {}).get("type") in ("any", "tool"):
        raise WireError(400, "Thinking may not be enabled when tool_choice forces tool use.")
    if "temperature" in body or "top_k" in body:
        raise WireError(400, "temperature and top_k may not be set when thinking is enabled")
    messages = body["messages"]
    last, before = messages[-1], messages[-2] if len(messages) > 1 else None
    results = isinstance(last.get("content"), list) and any(block.get("type") == "tool_result" for block in last["content"])
    if before is not None and results and (not isinstance(before.get("content"), list) or before["content"][0].get("type") not in _THINKING):
        raise WireError(400, "messages.1.content.0.type: Expected `thinking` or `redacted_thinking`, but found `tool_use`. When "
                             "`thinking` is enabled, a final `assistant` message must start with a thinking block (preceeding the "
                             "lastmost set of `tool_use` and `tool_result` blocks). To avoid this requirement, disable `thinking`.")
