"""A chat completion request as an Anthropic Messages request (pure functions).

The messages are `content.anthropic_messages`'s; this module maps the rest: the output cap
(required upstream), stops, sampling, tools and tool choice, `reasoning_effort` as thinking,
`response_format` (json_schema as a forced tool whose input is the answer), `user`, and the cache
breakpoints of `cache: auto`. What Anthropic cannot do is a 400 naming the field, never dropped in
silence: `n` above 1, logprobs, audio, `logit_bias`, penalties other than 0, custom tools."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from contract.errors import InvalidRequestError
from providers.inference.anthropic.caching import add_breakpoints
from providers.inference.anthropic.content import Recall, anthropic_messages, without_thinking

__all__ = ["JSON_OBJECT_INSTRUCTION", "Settings", "Translation", "messages_request"]

JSON_OBJECT_INSTRUCTION = "Answer with one JSON object and nothing else: no prose before or after it, no code fence."
_SCHEMA_TOOL_DESCRIPTION = "Give your answer by calling this tool: its input is the answer, in the shape its schema describes."
_ADAPTIVE_EFFORT = {"minimal": "low", "low": "low", "medium": "medium", "high": "high", "xhigh": "xhigh"}
_THINKING = ("thinking", "redacted_thinking")


@dataclass(frozen=True)
class Settings:
    """What the translation takes from the provider's config."""

    max_tokens: int = 4096
    cache: bool = False
    thinking: str = "budget"
    budgets: Mapping[str, int] = field(default_factory=lambda: {"minimal": 1024, "low": 2048, "medium": 8192, "high": 16384,
                                                                  "xhigh": 32000})


@dataclass(frozen=True)
class Translation:
    body: dict[str, Any]
    schema_tool: str | None = None
    """The tool standing for `response_format`'s schema: its call is the answer's content."""


def messages_request(chat: Mapping[str, Any], settings: Settings, recall: Recall, *, stream: bool = False) -> Translation:
    _refuse_unsupported(chat)
    system, messages = anthropic_messages(chat.get("messages") or [], recall)
    cap = chat.get("max_completion_tokens") or chat.get("max_tokens")
    body: dict[str, Any] = {"model": chat["model"], "messages": messages, "max_tokens": cap or settings.max_tokens}
    offered, choice = _allowed(chat.get("tools"), chat.get("tool_choice"))
    tools = _tools(offered)
    user_tools = bool(tools)
    schema_tool = None
    fmt = chat.get("response_format")
    if isinstance(fmt, Mapping) and fmt.get("type") == "json_schema":
        schema_tool, tool = _schema_tool(fmt, tools)
        tools.append(tool)
    elif isinstance(fmt, Mapping) and fmt.get("type") == "json_object":
        system.append({"type": "text", "text": JSON_OBJECT_INSTRUCTION})
    if system:
        body["system"] = system
    if tools:
        body["tools"] = tools
        anthropic_choice = _tool_choice(choice, chat.get("parallel_tool_calls"), schema_tool, user_tools)
        if anthropic_choice is not None:
            body["tool_choice"] = anthropic_choice
    _sampling(body, chat)
    _thinking(body, chat, settings, cap_given=bool(cap))
    if "thinking" not in body:
        body["messages"] = without_thinking(messages)
    identity = chat.get("user") or chat.get("safety_identifier")
    if isinstance(identity, str) and identity:
        body["metadata"] = {"user_id": identity}
    if stream:
        body["stream"] = True
    if settings.cache:
        add_breakpoints(body)
    return Translation(body, schema_tool)


def _refuse_unsupported(chat: Mapping[str, Any]) -> None:
    def refuse(param: str, what: str) -> InvalidRequestError:
        return InvalidRequestError(f"Unsupported parameter: '{param}': {what}.", param=param, code="unsupported_parameter")

    if isinstance(chat.get("n"), int) and chat["n"] > 1:
        raise refuse("n", "Anthropic's models give one choice a request")
    if chat.get("logprobs") or chat.get("top_logprobs"):
        raise refuse("logprobs" if chat.get("logprobs") else "top_logprobs", "Anthropic's models give no log probabilities")
    if chat.get("audio") or "audio" in (chat.get("modalities") or ()):
        raise refuse("audio" if chat.get("audio") else "modalities", "Anthropic's models give no audio")
    if chat.get("logit_bias"):
        raise refuse("logit_bias", "Anthropic's models take no logit bias")
    for penalty in ("presence_penalty", "frequency_penalty"):
        if chat.get(penalty):
            raise refuse(penalty, "Anthropic's models take no penalties")


def _allowed(tools: Any, choice: Any) -> tuple[Any, Any]:
    """The tools on offer and the choice among them: `allowed_tools` narrows the tools to those it names."""
    if not isinstance(choice, Mapping) or choice.get("type") != "allowed_tools":
        return tools, choice
    allowed = choice.get("allowed_tools") or {}
    names = {(tool.get("function") or {}).get("name") for tool in allowed.get("tools") or () if isinstance(tool, Mapping)}
    return [tool for tool in tools or () if (tool.get("function") or {}).get("name") in names], allowed.get("mode") or "auto"


def _tools(value: Any) -> list[dict[str, Any]]:
    tools = []
    for index, tool in enumerate(value or ()):
        if tool.get("type") != "function":
            raise InvalidRequestError(f"Unsupported value for 'tools[{index}].type': Anthropic's models take function tools, "
                                      f"not '{tool.get('type')}' tools.", param=f"tools[{index}].type", code="unsupported_value")
        function = tool.get("function") or {}
        schema = dict(function.get("parameters") or {"type": "object", "properties": {}})
        schema.setdefault("type", "object")
        entry: dict[str, Any] = {"name": function.get("name"), "input_schema": schema}
        if function.get("description"):
            entry["description"] = function["description"]
        cache = tool.get("cache_control") or function.get("cache_control")
        if isinstance(cache, dict):
            entry["cache_control"] = cache
        tools.append(entry)
    return tools


def _schema_tool(fmt: Mapping[str, Any], tools: list[dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    spec = fmt.get("json_schema") or {}
    name = str(spec.get("name") or "answer")
    while any(tool["name"] == name for tool in tools):
        name += "_answer"
    schema = dict(spec.get("schema") or {"type": "object"})
    schema.setdefault("type", "object")
    return name, {"name": name, "description": str(spec.get("description") or _SCHEMA_TOOL_DESCRIPTION), "input_schema": schema}


def _tool_choice(choice: Any, parallel: Any, schema_tool: str | None, user_tools: bool) -> dict[str, Any] | None:
    named = choice.get("function", {}).get("name") if isinstance(choice, Mapping) and choice.get("type") == "function" else None
    result: dict[str, Any] | None
    if named:
        result = {"type": "tool", "name": named}
    elif schema_tool is not None:
        # The answer is the schema tool's call: forced when no other tool may be called, else one of them or it.
        result = {"type": "tool", "name": schema_tool} if not user_tools or choice == "none" else {"type": "any"}
    elif choice in ("auto", "none"):
        result = {"type": choice}
    elif choice == "required":
        result = {"type": "any"}
    else:
        result = None
    if parallel is False and (result is None or result["type"] != "none"):
        result = {**(result or {"type": "auto"}), "disable_parallel_tool_use": True}
    return result


def _sampling(body: dict[str, Any], chat: Mapping[str, Any]) -> None:
    stop = chat.get("stop")
    if stop:
        body["stop_sequences"] = [stop] if isinstance(stop, str) else list(stop)
    if isinstance(chat.get("temperature"), (int, float)):
        body["temperature"] = min(float(chat["temperature"]), 1.0)  # OpenAI's 0..2, Anthropic's 0..1
    for name in ("top_p", "top_k"):
        if isinstance(chat.get(name), (int, float)):
            body[name] = chat[name]


def _thinking(body: dict[str, Any], chat: Mapping[str, Any], settings: Settings, *, cap_given: bool) -> None:
    """Thinking on as `reasoning_effort` asks (or as a client's own `thinking` says), unless the
    request forces a tool (Anthropic takes no forced tool with thinking) or continues a tool call
    whose turn carries no signed thinking to hand back (Anthropic refuses that with thinking on)."""
    thinking, effort = chat.get("thinking"), chat.get("reasoning_effort")
    if not isinstance(thinking, Mapping):
        if effort is None or effort == "none":
            return
        if effort not in settings.budgets:
            raise InvalidRequestError(f"Invalid value for 'reasoning_effort': {effort!r} (expected one of none, "
                                      f"{', '.join(settings.budgets)}).", param="reasoning_effort", code="invalid_value")
        thinking = {"type": "adaptive"} if settings.thinking == "adaptive" else {"type": "enabled", "budget_tokens": settings.budgets[effort]}
    if thinking.get("type") == "disabled":
        return
    if (body.get("tool_choice") or {}).get("type") in ("any", "tool") or _unsigned_tool_turn(body["messages"]):
        return
    body["thinking"] = dict(thinking)
    if thinking.get("type") == "adaptive" and isinstance(effort, str) and effort in _ADAPTIVE_EFFORT:
        body["output_config"] = {"effort": _ADAPTIVE_EFFORT[effort]}
    budget = thinking.get("budget_tokens")
    if isinstance(budget, int) and not (cap_given and body["max_tokens"] > budget):
        body["max_tokens"] += budget  # Anthropic counts thinking in max_tokens, which must be above the budget
    for name in ("temperature", "top_p", "top_k"):  # Anthropic takes none of them with thinking
        body.pop(name, None)


def _unsigned_tool_turn(messages: list[dict[str, Any]]) -> bool:
    """Whether the request continues a tool call whose assistant turn has no thinking to hand back."""
    if len(messages) < 2 or messages[-1]["role"] != "user" or messages[-2]["role"] != "assistant":
        return False
    if not any(block["type"] == "tool_result" for block in messages[-1]["content"]):
        return False
    return messages[-2]["content"][0]["type"] not in _THINKING
