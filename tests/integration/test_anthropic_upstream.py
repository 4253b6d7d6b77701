"""The `anthropic` inference provider in a stack, pointed at the fake Anthropic upstream
(tests/fake_anthropic) and driven by the openai SDK in server and library modes: chat completions
plain and streamed with tools, Responses with a function round trip and a reasoning chain whose
thinking goes back to Claude signed (from the store, and from encrypted reasoning), a conversation,
and the upstream's errors (529 as 503, 429 with retry-after)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai
import pytest

from fake_mcp.servers import McpServers
from fake_anthropic import DEFAULT_TEXT, MODELS, RETRY_AFTER_S, FakeAnthropic, running_fake_anthropic, sign
from runtime.testing.targets import open_target

MODEL = MODELS[0]
WEATHER = {"type": "function", "name": "get_weather", "description": "The weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
CHAT_WEATHER = {"type": "function", "function": {k: v for k, v in WEATHER.items() if k != "type"}}


@dataclass
class Stack:
    client: openai.OpenAI
    upstream: FakeAnthropic

    def last_body(self) -> dict[str, Any]:
        body: dict[str, Any] = self.upstream.bodies()[-1]
        return body


def run_yaml(root: Path, upstream: FakeAnthropic) -> Path:
    path = root / "run.yaml"
    path.write_text(f"""
name: anthropic
state_dir: {root / 'state'}
recording: {{mode: live}}
providers:
  inference:
    - provider_id: claude
      provider_type: anthropic
      config: {{base_url: "{upstream.url}", api_key: secret, cache: auto}}
  responses: [{{provider_id: builtin, provider_type: builtin}}]
  conversations: [{{provider_id: builtin, provider_type: builtin}}]
  tool_runtime: [{{provider_id: mcp, provider_type: mcp, config: {{allow_private: [127.0.0.1]}}}}]
""")
    return path


@pytest.fixture(scope="module", params=["server", "library"])
def stack(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("anthropic")
    with running_fake_anthropic(api_key="secret") as upstream:
        config = run_yaml(root, upstream)
        with open_target(f"{request.param}:{config}", env={**os.environ, "STACK_RECORDING_MODE": "live"}) as target:
            client = target.openai(max_retries=0, timeout=30)
            try:
                yield Stack(client, upstream)
            finally:
                client.close()


def test_the_models_are_listed_and_a_chat_completion_answers(stack: Stack) -> None:
    assert {f"claude/{model}" for model in MODELS} <= {model.id for model in stack.client.models.list()}
    completion = stack.client.chat.completions.create(model=MODEL, messages=[{"role": "system", "content": "Be brief."},
                                                                             {"role": "user", "content": "Hi"}])
    assert completion.choices[0].message.content == DEFAULT_TEXT and completion.choices[0].finish_reason == "stop"
    assert completion.usage is not None and completion.usage.prompt_tokens_details is not None
    assert completion.usage.prompt_tokens_details.cached_tokens == 10  # cache: auto put breakpoints, which the fake reads
    body = stack.last_body()
    assert body["system"] == [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}]


def test_a_streamed_chat_completion_with_tools(stack: Stack) -> None:
    stream = stack.client.chat.completions.create(
        model=MODEL, stream=True, stream_options={"include_usage": True}, tools=[CHAT_WEATHER],  # type: ignore[list-item]
        messages=[{"role": "user", "content": 'Weather? [tool:get_weather {"city": "Paris"}]'}])
    chunks = list(stream)
    calls = [call for chunk in chunks if chunk.choices for call in chunk.choices[0].delta.tool_calls or ()]
    assert calls[0].id and calls[0].id.startswith("toolu_") and calls[0].function and calls[0].function.name == "get_weather"
    assert json.loads("".join(call.function.arguments or "" for call in calls if call.function)) == {"city": "Paris"}
    assert [chunk.choices[0].finish_reason for chunk in chunks if chunk.choices and chunk.choices[0].finish_reason] == ["tool_calls"]
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0


def test_a_chat_round_trip_hands_the_thinking_blocks_back_with_the_message(stack: Stack) -> None:
    messages: list[Any] = [{"role": "user", "content": 'Weather? [tool:get_weather {"city": "Oslo"}]'}]
    answer = stack.client.chat.completions.create(model=MODEL, messages=messages, tools=[CHAT_WEATHER],  # type: ignore[list-item]
                                                  reasoning_effort="low")
    message = answer.choices[0].message.model_dump(exclude_none=True)
    assert message["thinking_blocks"][0]["signature"] == sign(message["reasoning_content"])
    messages += [message, {"role": "tool", "tool_call_id": message["tool_calls"][0]["id"], "content": "snow"}]
    again = stack.client.chat.completions.create(model=MODEL, messages=messages, tools=[CHAT_WEATHER],  # type: ignore[list-item]
                                                 reasoning_effort="low")
    assert again.choices[0].message.content == "The tool said: snow"
    assert stack.last_body()["messages"][1]["content"][0] == message["thinking_blocks"][0]
    plain = stack.client.chat.completions.create(model=MODEL, messages=messages, tools=[CHAT_WEATHER])  # type: ignore[list-item]
    assert plain.choices[0].message.content == "The tool said: snow"  # thinking off: its blocks stay home
    assert "thinking" not in json.dumps(stack.last_body())


def test_a_responses_function_round_trip(stack: Stack) -> None:
    first = stack.client.responses.create(model=MODEL, input='Weather in Paris? [tool:get_weather {"city": "Paris"}]',
                                          tools=[WEATHER])  # type: ignore[list-item]
    call = next(item for item in first.output if item.type == "function_call")
    assert call.name == "get_weather" and json.loads(call.arguments) == {"city": "Paris"}
    second = stack.client.responses.create(model=MODEL, previous_response_id=first.id, tools=[WEATHER],  # type: ignore[list-item]
                                           input=[{"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}])
    assert second.output_text == "The tool said: sunny"
    messages = stack.last_body()["messages"]
    assert [message["role"] for message in messages] == ["user", "assistant", "user"]
    assert messages[2]["content"][0] == {"type": "tool_result", "tool_use_id": call.call_id, "content": "sunny",
                                         "cache_control": {"type": "ephemeral"}}


@pytest.mark.parametrize("stored", [True, False], ids=["previous_response_id", "encrypted reasoning"])
def test_a_reasoning_chain_hands_claude_its_signed_thinking_back(stack: Stack, stored: bool) -> None:
    ask = 'Weather in Rome? [tool:get_weather {"city": "Rome"}]'
    first = stack.client.responses.create(model=MODEL, input=ask, tools=[WEATHER], reasoning={"effort": "low"},  # type: ignore[list-item]
                                          store=stored, include=[] if stored else ["reasoning.encrypted_content"])
    reasoning = next(item for item in first.output if item.type == "reasoning")
    thought = "".join(part.text for part in reasoning.content or ())
    assert thought.startswith("Let me think")
    call = next(item for item in first.output if item.type == "function_call")
    output = {"type": "function_call_output", "call_id": call.call_id, "output": "cloudy"}
    if stored:
        second = stack.client.responses.create(model=MODEL, previous_response_id=first.id, input=[output],  # type: ignore[list-item]
                                               tools=[WEATHER], reasoning={"effort": "low"})  # type: ignore[list-item]
    else:
        assert reasoning.encrypted_content
        given = [item.model_dump(exclude_none=True) for item in first.output]
        second = stack.client.responses.create(model=MODEL, input=[{"role": "user", "content": ask}, *given, output], store=False,
                                               tools=[WEATHER], reasoning={"effort": "low"})  # type: ignore[list-item]
    assert second.output_text == "The tool said: cloudy"
    body = stack.last_body()
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert body["messages"][1]["content"][0] == {"type": "thinking", "thinking": thought, "signature": sign(thought)}


def test_a_server_side_tool_loop_keeps_claudes_thinking_between_its_calls(stack: Stack, mcp_servers: McpServers) -> None:
    tool = {"type": "mcp", "server_label": "demo", "server_url": mcp_servers.open, "require_approval": "never"}
    response = stack.client.responses.create(model=MODEL, input='Echo it. [tool:echo {"text": "hi"}]', tools=[tool],  # type: ignore[list-item]
                                             reasoning={"effort": "low"})
    assert [item.type for item in response.output if item.type != "mcp_list_tools"] == ["reasoning", "mcp_call", "reasoning", "message"]
    assert response.output_text == "The tool said: echo: hi"
    first, second = stack.upstream.bodies()[-2:]
    assert second["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert second["messages"][1]["content"][0]["type"] == "thinking"
    assert second["messages"][1]["content"][1]["name"] == "echo" and first["messages"][0] == second["messages"][0]


def test_a_streamed_response_with_reasoning(stack: Stack) -> None:
    events = list(stack.client.responses.create(model=MODEL, input="Hi", reasoning={"effort": "medium"}, stream=True))
    kinds = [event.type for event in events]
    assert "response.reasoning_text.delta" in kinds and "response.output_text.delta" in kinds
    assert kinds[-1] == "response.completed"
    assert stack.last_body()["thinking"] == {"type": "enabled", "budget_tokens": 8192}


@pytest.mark.parametrize("streamed", [False, True])
def test_a_structured_answer_is_the_forced_tools_input(stack: Stack, streamed: bool) -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"], "additionalProperties": False}
    text = {"format": {"type": "json_schema", "name": "place", "schema": schema, "strict": True}}
    if streamed:
        events = list(stack.client.responses.create(model=MODEL, input="Where?", text=text, stream=True))  # type: ignore[arg-type]
        answer = "".join(event.delta for event in events if event.type == "response.output_text.delta")
    else:
        answer = stack.client.responses.create(model=MODEL, input="Where?", text=text).output_text  # type: ignore[arg-type]
    assert json.loads(answer) == {"city": "text"}
    assert stack.last_body()["tool_choice"] == {"type": "tool", "name": "place"}


def test_a_conversation_carries_its_turns_to_claude(stack: Stack) -> None:
    conversation = stack.client.conversations.create()
    stack.client.responses.create(model=MODEL, input="My name is Ada.", conversation=conversation.id)
    stack.client.responses.create(model=MODEL, input="What is my name?", conversation=conversation.id)
    texts = [block.get("text") for message in stack.last_body()["messages"] for block in message["content"]]
    assert texts == ["My name is Ada.", DEFAULT_TEXT, "What is my name?"]


def test_an_overloaded_upstream_is_a_503_and_a_rate_limit_keeps_retry_after(stack: Stack) -> None:
    with pytest.raises(openai.InternalServerError) as overloaded:
        stack.client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hi [error:529]"}])
    assert overloaded.value.status_code == 503 and "Overloaded" in str(overloaded.value)
    with pytest.raises(openai.RateLimitError) as limited:
        stack.client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hi [error:429]"}])
    assert limited.value.response.headers["retry-after"] == RETRY_AFTER_S
    with pytest.raises(openai.APIStatusError) as streamed:
        list(stack.client.chat.completions.create(model=MODEL, stream=True, messages=[{"role": "user", "content": "Hi [error:529]"}]))
    assert streamed.value.status_code == 503
