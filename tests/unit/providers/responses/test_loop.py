"""The tool loop as a specification, with an in-process tool session and a scripted model."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import pytest

from providers.responses.loop import GRAMMAR_REPAIRS, Hidden, LoopLimits, ToolLoop
from providers.responses.tools import RequestTools
from providers.responses.translate import Event, StreamTranslator
from contract.responses.models import CreateResponse
from contract.tool_runtime.protocol import FunctionSpec, ItemSink, ModelCall
from contract.errors import UpstreamError


class Session:
    """A tool session whose functions run the coroutines given for them."""

    def __init__(self, behaviours: dict[str, Callable[[], Awaitable[str]]], approve: Sequence[str] = ()) -> None:
        self.behaviours = behaviours
        self.approve = set(approve)
        self.ran: list[str] = []
        self.closed = False

    def preparations(self) -> Sequence[Callable[[ItemSink], Awaitable[None]]]:
        async def prepare(sink: ItemSink) -> None:
            item = sink.open({"type": "fake_list", "id": "fl_1", "tools": sorted(self.behaviours)})
            item.emit("response.fake_list.completed")

        return [prepare]

    def functions(self) -> Sequence[FunctionSpec]:
        return [FunctionSpec(name, {"type": "object"}, group="fake") for name in self.behaviours]

    def pending_calls(self) -> Sequence[ModelCall]:
        return []

    def approval_item(self, call: ModelCall) -> dict[str, Any] | None:
        if call.name not in self.approve:
            return None
        return {"type": "fake_approval_request", "id": f"far_{call.call_id}", "name": call.name, "arguments": call.arguments}

    async def run(self, call: ModelCall, sink: ItemSink) -> None:
        item = sink.open({"type": "fake_call", "id": f"fc_{call.call_id}", "name": call.name, "arguments": call.arguments,
                          "status": "in_progress"})
        item.emit("response.fake_call.in_progress")
        self.ran.append(call.name)
        item.item.update(output=await self.behaviours[call.name](), status="completed")
        item.emit("response.fake_call.completed")

    def citations(self) -> None:
        return None

    async def aclose(self) -> None:
        self.closed = True


def text(content: str) -> list[dict[str, Any]]:
    return [{"choices": [{"index": 0, "delta": {"content": content}, "finish_reason": "stop"}]}]


def calls(*names: str) -> list[dict[str, Any]]:
    deltas = [{"index": i, "id": f"call_{name}_{i}", "function": {"name": name, "arguments": json.dumps({"n": i})}} for i, name in enumerate(names)]
    return [{"choices": [{"index": 0, "delta": {"tool_calls": deltas}, "finish_reason": "tool_calls"}]}]


def call(name: str, arguments: dict[str, Any], call_id: str = "") -> list[dict[str, Any]]:
    delta = {"index": 0, "id": call_id or f"call_{name}_{json.dumps(arguments, sort_keys=True)}", "function": {
        "name": name, "arguments": json.dumps(arguments)}}
    return [{"choices": [{"index": 0, "delta": {"tool_calls": [delta]}, "finish_reason": "tool_calls"}]}]


class Model:
    """Answers each turn with the next scripted chunks; records what each turn was offered."""

    def __init__(self, *turns: list[dict[str, Any]]) -> None:
        self.turns = list(turns)
        self.offered: list[tuple[list[str], Any]] = []
        self.hidden: list[list[tuple[int, Any]]] = []

    async def __call__(self, translator: StreamTranslator, offered: tuple[list[dict[str, Any]], Any] | None,
                       max_tokens: int | None, hidden: Hidden) -> AsyncIterator[Event]:
        self.hidden.append(list(hidden))
        tools, choice = offered or ([], None)
        self.offered.append(([tool["function"]["name"] for tool in tools], choice))
        for chunk in self.turns.pop(0):
            for event in translator.feed(chunk):
                yield event


def make_loop(model: Model, session: Session, *, user_functions: Sequence[str] = (), max_tool_calls: int | None = None,
              limits: LoopLimits = LoopLimits()) -> ToolLoop:
    tools = [{"type": "function", "name": name, "parameters": {"type": "object"}} for name in user_functions]
    request = CreateResponse(model="m", input="go", tools=[*tools, {"type": "fake"}], max_tool_calls=max_tool_calls)
    request_tools = RequestTools(request, [(session, frozenset({"fake"}))])
    counter = itertools.count(1)

    def translator(first: int, is_server: Callable[[str], bool], citations: Any) -> StreamTranslator:
        return StreamTranslator(first_output_index=first, is_server=is_server, make_id=lambda prefix: f"{prefix}_{next(counter)}",
                                citations=citations)

    return ToolLoop([], model, request_tools, translator, limits, max_tool_calls=max_tool_calls)


async def produce(loop: ToolLoop) -> list[Event]:
    prepared = await loop.prepare()
    return [event async for event in loop.events(prepared)]


async def test_calls_of_one_turn_run_together_and_are_announced_in_the_models_order() -> None:
    both_started = asyncio.Barrier(2)
    second_done = asyncio.Event()

    async def first() -> str:
        await asyncio.wait_for(both_started.wait(), 5)  # fails unless the second runs meanwhile
        await second_done.wait()  # and ends after it
        return "one"

    async def second() -> str:
        await asyncio.wait_for(both_started.wait(), 5)
        second_done.set()
        return "two"

    session = Session({"first": first, "second": second})
    model = Model(calls("first", "second"), text("done"))
    loop = make_loop(model, session)
    events = await produce(loop)

    assert [item["type"] for item in loop.output] == ["fake_list", "fake_call", "fake_call", "message"]
    assert [item.get("output") for item in loop.output[1:3]] == ["one", "two"]
    kinds = [(event["type"], event.get("output_index")) for event in events]
    assert kinds[:3] == [("response.output_item.added", 0), ("response.fake_list.completed", 0), ("response.output_item.done", 0)]
    assert kinds[3:11] == [
        ("response.output_item.added", 1), ("response.fake_call.in_progress", 1), ("response.fake_call.completed", 1),
        ("response.output_item.done", 1),
        ("response.output_item.added", 2), ("response.fake_call.in_progress", 2), ("response.fake_call.completed", 2),
        ("response.output_item.done", 2),
    ]
    # The added event shows the item as it was opened; done shows it finished.
    assert events[3]["item"]["status"] == "in_progress" and events[6]["item"]["status"] == "completed"
    assert loop.status == "completed" and loop.output[-1]["content"][0]["text"] == "done"
    assert model.offered == [(["first", "second"], None), (["first", "second"], None)]


async def test_the_first_call_streams_live_while_later_ones_wait() -> None:
    release = asyncio.Event()

    async def slow() -> str:
        await release.wait()
        return "slow"

    async def fast() -> str:
        return "fast"

    loop = make_loop(Model(calls("slow", "fast"), text("ok")), Session({"slow": slow, "fast": fast}))
    seen: list[tuple[str, Any]] = []
    async for event in loop.events(await loop.prepare()):
        seen.append((event["type"], event.get("output_index")))
        if event["type"] == "response.fake_call.in_progress" and event["output_index"] == 1:
            # The slow call is announced before it ends; the fast one (already done) is not yet.
            assert ("response.output_item.added", 2) not in seen
            release.set()
    assert seen.index(("response.output_item.done", 1)) < seen.index(("response.output_item.added", 2))


async def test_max_tool_calls_ignores_further_calls_and_offers_no_more_server_tools() -> None:
    async def answer() -> str:
        return "x"

    model = Model(calls("a", "a", "a"), text("final"))
    session = Session({"a": answer})
    loop = make_loop(model, session, max_tool_calls=2)
    await produce(loop)
    assert session.ran == ["a", "a"]
    assert [item["type"] for item in loop.output] == ["fake_list", "fake_call", "fake_call", "message"]
    assert model.offered[1] == ([], None)  # the answer turn has no server-side function left


async def test_a_model_still_calling_tools_at_the_iteration_limit_ends_incomplete() -> None:
    async def answer() -> str:
        return "again"

    loop = make_loop(Model(call("a", {"q": 1}), call("a", {"q": 2}), call("a", {"q": 3})), Session({"a": answer}),
                     limits=LoopLimits(max_iterations=2))
    await produce(loop)
    assert loop.status == "incomplete" and loop.incomplete_reason == "max_messages"
    assert [item["type"] for item in loop.output] == ["fake_list", "fake_call", "fake_call"]


async def test_a_client_side_call_ends_the_loop_after_the_turns_server_calls() -> None:
    async def answer() -> str:
        return "x"

    session = Session({"a": answer})
    loop = make_loop(Model(calls("a", "lookup")), session, user_functions=["lookup"])
    await produce(loop)
    assert session.ran == ["a"] and loop.status == "completed"
    assert [item["type"] for item in loop.output] == ["fake_list", "function_call", "fake_call"]


async def test_a_call_that_needs_approval_is_returned_as_its_request_and_not_run() -> None:
    async def answer() -> str:
        raise AssertionError("must not run")

    session = Session({"risky": answer}, approve=["risky"])
    loop = make_loop(Model(calls("risky")), session)
    events = await produce(loop)
    assert session.ran == [] and loop.status == "completed"
    assert loop.output[-1]["type"] == "fake_approval_request"
    assert [event["type"] for event in events[-2:]] == ["response.output_item.added", "response.output_item.done"]


async def test_a_name_taken_by_a_client_function_is_offered_under_its_groups_prefix() -> None:
    async def answer() -> str:
        return "server"

    session = Session({"search": answer})
    model = Model(calls("fake__search"), text("ok"))
    loop = make_loop(model, session, user_functions=["search"])
    await produce(loop)
    assert model.offered[0][0] == ["search", "fake__search"]
    assert session.ran == ["search"]


async def test_closing_mid_call_cancels_it_and_leaves_its_item_incomplete() -> None:
    started = asyncio.Event()

    async def hang() -> str:
        started.set()
        await asyncio.sleep(3600)
        return "never"

    loop = make_loop(Model(calls("hang")), Session({"hang": hang}))
    events = loop.events(await loop.prepare())
    async for event in events:
        if event["type"] == "response.fake_call.in_progress":
            break
    await events.aclose()
    loop.close()
    assert started.is_set() and loop.output[-1]["status"] == "incomplete"


async def test_a_tool_that_raises_fails_the_loop_instead_of_hanging_it() -> None:
    async def broken() -> str:
        raise RuntimeError("tool bug")

    loop = make_loop(Model(calls("broken")), Session({"broken": broken}))
    with pytest.raises(RuntimeError, match="tool bug"):
        await produce(loop)


DIGITS = {"type": "custom", "name": "digits", "format": {"type": "grammar", "syntax": "regex", "definition": "[0-9]+"}}


def custom(call_id: str, text: str) -> list[dict[str, Any]]:
    delta = {"index": 0, "id": call_id, "function": {"name": "digits", "arguments": json.dumps({"input": text})}}
    return [{"choices": [{"index": 0, "delta": {"tool_calls": [delta]}, "finish_reason": "tool_calls"}]}]


def grammar_loop(model: Model) -> ToolLoop:
    request = CreateResponse(model="m", input="go", tools=[DIGITS])
    request_tools = RequestTools(request, [])
    counter = itertools.count(1)

    def translator(first: int, is_server: Callable[[str], bool], citations: Any) -> StreamTranslator:
        return StreamTranslator(first_output_index=first, is_server=is_server, make_id=lambda prefix: f"{prefix}_{next(counter)}",
                                client_tool=request_tools.client_tool)

    return ToolLoop([], model, request_tools, translator)


async def test_a_refused_custom_call_goes_back_to_the_model_and_only_the_matching_one_is_output() -> None:
    model = Model(custom("call_1", "one"), custom("call_2", "1"))
    loop = grammar_loop(model)
    events = await produce(loop)
    assert [(item["type"], item["call_id"], item["input"]) for item in loop.output] == [("custom_tool_call", "call_2", "1")]
    assert {event["output_index"] for event in events} == {0}
    assert model.hidden[0] == []
    (refused_call, refusal) = [item for _, item in model.hidden[1]]
    assert (refused_call["type"], refused_call["input"]) == ("custom_tool_call", "one")
    assert refusal == {"type": "custom_tool_call_output", "call_id": "call_1", "output":
                       "Refused: the input does not match the regex grammar at line 1, column 1, at 'one'. "
                       "Call the tool again with input that matches its grammar."}
    assert loop.status == "completed" and loop.hidden == model.hidden[1]


async def test_a_model_that_keeps_missing_the_grammar_fails_the_response() -> None:
    model = Model(*(custom(f"call_{n}", "x") for n in range(GRAMMAR_REPAIRS + 1)))
    loop = grammar_loop(model)
    with pytest.raises(UpstreamError, match=r"'digits' did not match the tool's grammar after 3 attempts") as raised:
        await produce(loop)
    assert raised.value.status == 502 and loop.output == [] and model.turns == []


async def test_a_call_the_model_already_made_is_not_run_again_and_the_model_is_told_its_result_is_above() -> None:
    """A small model asked to search calls the search again and again with the same query: run
    once, the model reads each repeat answered that the result is above, and goes on."""
    from providers.responses.loop import REPEATED_CALL
    from runtime.observability.metrics import Metrics

    async def search() -> str:
        return "found: the answer is 42"

    session = Session({"search": search})
    # A call, the same again (its arguments' keys in another order), then an answer.
    model = Model(call("search", {"q": "x", "k": 1}, "c1"), call("search", {"k": 1, "q": "x"}, "c2"), text("42"))
    metrics = Metrics()
    entered = metrics.enter()
    try:
        loop = make_loop(model, session)
        await produce(loop)
    finally:
        metrics.leave(entered)
    assert session.ran == ["search"]  # once
    assert loop.status == "completed" and loop.output[-1]["content"][0]["text"] == "42"
    assert [item["type"] for item in loop.output] == ["fake_list", "fake_call", "message"]
    told = [item for _, item in model.hidden[2]]  # what the model's third turn saw beyond the output
    assert told == [{"type": "function_call", "call_id": "c2", "name": "search", "arguments": '{"k": 1, "q": "x"}'},
                    {"type": "function_call_output", "call_id": "c2", "output": REPEATED_CALL}]
    assert "Not run again" in REPEATED_CALL and "result is above" in REPEATED_CALL
    # The turn after the repeat is offered no server-side function: the model answers from what it has.
    assert [names for names, _ in model.offered] == [["search"], ["search"], []]
    metrics.fold()
    assert 'stack_tool_calls_repeated_total{tool_type="fake"} 1.0' in metrics.exposition().decode()


def test_a_requests_max_infer_iters_lowers_the_limit_never_raises_it() -> None:
    limits = LoopLimits(max_iterations=5, parallel=3)
    assert limits.at_most(None) is limits and limits.at_most(9) is limits
    assert limits.at_most(2) == LoopLimits(max_iterations=2, parallel=3)
