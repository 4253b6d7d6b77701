"""The OpenAI Agents SDK (`openai-agents`), unmodified, as a client of the stack: an agent whose
tools the SDK runs itself (a function, a custom tool with a grammar, apply_patch, shell) goes
through the tool call, the SDK's execution and the answer, with the request shapes the SDK sends
(its own tool definitions, `include`, output items sent back as input), streamed and not, over a
chain (`auto_previous_response_id`) and a server-side conversation, in server and library modes.
The model is the fake upstream, told by [directives] which tool to call."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import openai
from openai.types.shared import Reasoning
from pydantic import BaseModel
import pytest
from agents import (Agent, ApplyPatchTool, CustomTool, ModelSettings, OpenAIResponsesModel, OpenAIResponsesWSModel, Runner, ShellTool,
                    function_tool, set_tracing_disabled)
from agents.editor import ApplyPatchOperation, ApplyPatchResult
from agents.tool import ShellCallOutcome, ShellCommandOutput, ShellCommandRequest, ShellResult

from fake_upstream.server import FakeUpstream, running_fake_upstream
from runtime.testing.targets import StackTarget, open_target
from support.live_stack import run_yaml

set_tracing_disabled(True)  # the SDK would send its traces to OpenAI

DIGITS = {"type": "grammar", "syntax": "regex", "definition": "[0-9]+"}


@dataclass
class Stack:
    target: StackTarget
    upstream: FakeUpstream
    async_client: openai.AsyncOpenAI | None = None

    def client(self) -> openai.AsyncOpenAI:
        assert self.async_client is not None, "the test takes the `sdk` fixture"
        return self.async_client

    def last_chat(self) -> dict[str, Any]:
        return self.upstream.bodies("/v1/chat/completions")[-1]


@contextmanager
def started(mode: str, root: Path) -> Iterator[Stack]:
    with running_fake_upstream() as upstream:
        config = run_yaml(root, upstream.base_url, name="agents-sdk",
                          providers="  conversations: [{provider_id: builtin, provider_type: builtin}]\n")
        with open_target(f"{mode}:{config}", env={**os.environ, "STACK_RECORDING_MODE": "live"}) as target:
            yield Stack(target, upstream)


@pytest.fixture(scope="module", params=["server", "library"])
def stack(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with started(request.param, tmp_path_factory.mktemp("agents-sdk")) as stack:
        yield stack


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """WebSocket mode needs the server: the library client has no WebSocket transport."""
    with started("server", tmp_path_factory.mktemp("agents-sdk-ws")) as stack:
        yield stack


@pytest.fixture
async def sdk(stack: Stack) -> Any:
    """The stack with an AsyncOpenAI client of this test's event loop (closed on it)."""
    stack.async_client = stack.target.async_openai(max_retries=0, timeout=30)
    try:
        yield stack
    finally:
        await stack.async_client.close()
        stack.async_client = None


@dataclass
class Workspace:
    """What the agent's tools did, as the SDK ran them."""

    patches: list[ApplyPatchOperation] = field(default_factory=list)
    commands: list[list[str]] = field(default_factory=list)
    tickets: list[str] = field(default_factory=list)

    def create_file(self, operation: ApplyPatchOperation) -> ApplyPatchResult:
        self.patches.append(operation)
        return ApplyPatchResult(status="completed", output=f"created {operation.path}")

    def update_file(self, operation: ApplyPatchOperation) -> ApplyPatchResult:
        self.patches.append(operation)
        return ApplyPatchResult(status="completed", output=f"updated {operation.path}")

    def delete_file(self, operation: ApplyPatchOperation) -> ApplyPatchResult:
        self.patches.append(operation)
        return ApplyPatchResult(status="completed", output=f"deleted {operation.path}")

    def shell(self, request: ShellCommandRequest) -> ShellResult:
        commands = list(request.data.action.commands)
        self.commands.append(commands)
        return ShellResult(output=[ShellCommandOutput(command=command, stdout=f"ran {command}", outcome=ShellCallOutcome(type="exit", exit_code=0))
                                   for command in commands])

    def open_ticket(self, _context: Any, number: str) -> str:
        self.tickets.append(number)
        return f"ticket {number} opened"


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


def agent(stack: Stack, workspace: Workspace, *, websocket: bool = False, **settings: Any) -> Agent[Any]:
    model_class = OpenAIResponsesWSModel if websocket else OpenAIResponsesModel
    return Agent(
        name="coder", instructions="You help with code.",
        model=model_class(model="fake-model", openai_client=stack.client()),
        model_settings=ModelSettings(**settings),
        tools=[get_weather, ApplyPatchTool(editor=workspace), ShellTool(executor=workspace.shell),
               CustomTool(name="open_ticket", description="Open a ticket by its number", on_invoke_tool=workspace.open_ticket,
                          format=DIGITS)])


def call(name: str, arguments: dict[str, Any]) -> str:
    return f"[tool:{name} {json.dumps(arguments)}]"


async def test_a_function_tool_runs_in_the_sdk_and_its_result_is_answered(sdk: Stack) -> None:
    result = await Runner.run(agent(sdk, Workspace()), call("get_weather", {"city": "Paris"}))
    assert result.final_output == "Tool result: sunny in Paris"
    sent = sdk.last_chat()
    assert sent["messages"][0] == {"role": "system", "content": "You help with code."}
    assert sorted(tool["function"]["name"] for tool in sent["tools"]) == ["apply_patch", "get_weather", "open_ticket", "shell"]


async def test_apply_patch_and_shell_calls_reach_the_sdks_editor_and_executor(sdk: Stack) -> None:
    workspace = Workspace()
    result = await Runner.run(agent(sdk, workspace), call("apply_patch", {"type": "create_file", "path": "a.md", "diff": "+hi\n"}))
    assert [(patch.type, patch.path, patch.diff) for patch in workspace.patches] == [("create_file", "a.md", "+hi\n")]
    assert result.final_output == "Tool result: completed: created a.md"
    result = await Runner.run(agent(sdk, workspace), call("shell", {"commands": ["ls", "pwd"]}))
    assert workspace.commands == [["ls", "pwd"]]
    assert result.final_output == "Tool result: ran ls\n(exit code 0)\n\nran pwd\n(exit code 0)"


async def test_a_custom_tool_gets_only_input_its_grammar_accepts(sdk: Stack) -> None:
    workspace = Workspace()
    result = await Runner.run(agent(sdk, workspace), call("open_ticket", {"input": "no. 12"}) + '[fix:open_ticket {"input": "12"}]')
    assert workspace.tickets == ["12"] and result.final_output == "Tool result: ticket 12 opened"


async def test_a_streamed_run_gives_the_sdks_events_and_the_answer(sdk: Stack) -> None:
    run = Runner.run_streamed(agent(sdk, Workspace()), call("get_weather", {"city": "Oslo"}))
    kinds = [event.type async for event in run.stream_events()]
    assert "raw_response_event" in kinds and "run_item_stream_event" in kinds
    assert run.final_output == "Tool result: sunny in Oslo"


async def test_a_chain_by_previous_response_id_and_a_conversation_carry_the_context(sdk: Stack) -> None:
    chained = await Runner.run(agent(sdk, Workspace()), call("get_weather", {"city": "Rome"}), auto_previous_response_id=True)
    assert chained.final_output == "Tool result: sunny in Rome" and chained.last_response_id is not None
    assert (await sdk.client().responses.retrieve(chained.last_response_id)).previous_response_id is not None
    conversation = await sdk.client().conversations.create()
    first = await Runner.run(agent(sdk, Workspace()), "remember me", conversation_id=conversation.id)
    assert first.final_output == "You said: remember me"
    await Runner.run(agent(sdk, Workspace()), "again", conversation_id=conversation.id)
    texts = [message.get("content") for message in sdk.last_chat()["messages"]]
    assert texts[-3:] == ["remember me", "You said: remember me", "again"]


async def test_a_run_over_the_responses_websocket_chains_its_turns_on_one_socket(server: Stack) -> None:
    server.async_client = server.target.async_openai(max_retries=0, timeout=30)
    try:
        workspace = Workspace()
        model_agent = agent(server, workspace, websocket=True, store=False)
        result = await Runner.run(model_agent, call("open_ticket", {"input": "7"}), auto_previous_response_id=True)
        assert workspace.tickets == ["7"] and result.final_output == "Tool result: ticket 7 opened"
        streamed = Runner.run_streamed(model_agent, call("get_weather", {"city": "Lima"}))
        assert [event async for event in streamed.stream_events()] and streamed.final_output == "Tool result: sunny in Lima"
        await model_agent.model.close()  # type: ignore[union-attr]
    finally:
        await server.async_client.close()
        server.async_client = None


class Forecast(BaseModel):
    city: str
    sunny: bool


async def test_every_model_setting_the_sdk_sends_is_accepted_and_a_typed_output_parses(sdk: Stack) -> None:
    settings = ModelSettings(temperature=0.2, top_p=0.9, max_tokens=200, tool_choice="auto", parallel_tool_calls=True, truncation="auto",
                             reasoning=Reasoning(effort="low", summary="auto"), metadata={"run": "spec"}, store=True, include_usage=True,
                             response_include=["reasoning.encrypted_content"], top_logprobs=2, verbosity="low",
                             prompt_cache_retention="24h", extra_headers={"x-agent": "spec"})
    typed = Agent(name="forecaster", instructions="Answer as JSON.", output_type=Forecast, model_settings=settings,
                  model=OpenAIResponsesModel(model="fake-reasoner", openai_client=sdk.client()))
    result = await Runner.run(typed, '[answer {"text": "{\\"city\\": \\"Oslo\\", \\"sunny\\": false}"}]')
    assert result.final_output == Forecast(city="Oslo", sunny=False)
    sent = next(body for body in reversed(sdk.upstream.bodies("/v1/chat/completions")) if "tools" in body or "response_format" in body)
    assert sent["response_format"]["type"] == "json_schema" and sent["temperature"] == 0.2 and sent["reasoning_effort"] == "low"
    assert result.context_wrapper.usage.total_tokens > 0 and result.last_response_id is not None
    stored = await sdk.client().responses.retrieve(result.last_response_id)
    assert stored.metadata == {"run": "spec"} and stored.truncation == "auto" and stored.top_logprobs == 2


async def test_a_handoff_moves_the_run_to_the_other_agent_with_its_own_instructions(sdk: Stack) -> None:
    model = OpenAIResponsesModel(model="fake-model", openai_client=sdk.client())
    billing = Agent(name="billing", instructions="You handle invoices.", model=model)
    triage = Agent(name="triage", instructions="Route the user.", handoffs=[billing], model=model)
    result = await Runner.run(triage, "[tool:transfer_to_billing {}]")
    assert result.last_agent is billing and result.final_output.startswith("Tool result: ")
    sent = sdk.last_chat()
    assert sent["messages"][0] == {"role": "system", "content": "You handle invoices."}
    assert any(call["function"]["name"] == "transfer_to_billing" for message in sent["messages"] for call in message.get("tool_calls") or ())
