"""What a response becomes upstream: the chat completion request of its next model call."""

from __future__ import annotations

from typing import Any

from contract.responses.models import CreateResponse

__all__ = ["chat_request"]




def chat_request(request: CreateResponse, messages: list[dict[str, Any]], *, stream: bool,
                 offered: tuple[list[dict[str, Any]], Any] | None = None, max_tokens: int | None = None) -> dict[str, Any]:
    """The chat completion request that produces this response's next model output.

    `offered` is the turn's (tools, tool_choice) when the tool loop chose them; None: the
    request's function tools as they are. `max_tokens` is what is left of max_output_tokens."""
    body: dict[str, Any] = {"model": request.model, "messages": messages}
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    tools, choice = offered if offered is not None else (_chat_tools(request), _chat_tool_choice(request.tool_choice))
    if tools:
        body["tools"] = tools
        if choice is not None:
            body["tool_choice"] = choice
        if request.parallel_tool_calls is not None:
            body["parallel_tool_calls"] = request.parallel_tool_calls
    optional = {
        "max_completion_tokens": request.max_output_tokens if max_tokens is None else max_tokens,
        "temperature": request.temperature,
        "top_p": request.top_p,
        "presence_penalty": request.presence_penalty,
        "frequency_penalty": request.frequency_penalty,
        "user": request.user,
        "safety_identifier": request.safety_identifier,
        "prompt_cache_key": request.prompt_cache_key,
        "service_tier": request.service_tier,
        "reasoning_effort": (request.reasoning or {}).get("effort"),
        "response_format": _response_format(request.text),
    }
    body.update({key: value for key, value in optional.items() if value is not None})
    if request.wants_logprobs():
        body["logprobs"] = True
        if request.top_logprobs:
            body["top_logprobs"] = request.top_logprobs
    return body


def _chat_tools(request: CreateResponse) -> list[dict[str, Any]]:
    tools = [tool for tool in request.tools or [] if tool.get("type") == "function"]
    choice = request.tool_choice
    if choice == "none":
        return []
    if isinstance(choice, dict) and choice.get("type") == "allowed_tools":
        # Filtered here rather than passed on: few OpenAI-compatible servers know allowed_tools.
        allowed = {tool.get("name") for tool in choice.get("tools") or () if isinstance(tool, dict)}
        tools = [tool for tool in tools if tool["name"] in allowed]
    return [
        {"type": "function", "function": {key: tool[key] for key in ("name", "description", "parameters", "strict") if tool.get(key) is not None}}
        for tool in tools
    ]


def _chat_tool_choice(choice: str | dict[str, Any] | None) -> str | dict[str, Any] | None:
    if choice is None or isinstance(choice, str):
        return choice
    if choice.get("type") == "function":
        return {"type": "function", "function": {"name": choice.get("name")}}
    if choice.get("type") == "allowed_tools":
        return choice.get("mode") or "auto"
    return None


def _response_format(text: dict[str, Any] | None) -> dict[str, Any] | None:
    fmt = (text or {}).get("format")
    if not isinstance(fmt, dict) or fmt.get("type") in (None, "text"):
        return None
    if fmt["type"] == "json_object":
        return {"type": "json_object"}
    schema = {key: fmt[key] for key in ("name", "schema", "description", "strict") if fmt.get(key) is not None}
    return {"type": "json_schema", "json_schema": schema}
