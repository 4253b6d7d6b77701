"""The tool loop: the model turns of one response, and the server-side calls between them.

Each model turn is streamed through a `StreamTranslator`. Its server-side calls are not output as
function calls: once the turn ends they run, concurrently (at most `parallel` at once), each
producing its tool's own item. The loop calls the model again with their results, until the model
answers without a server-side call, a client-side call or an approval is due, `max_tool_calls` is
reached (the model's further calls are ignored, as OpenAI does, and it is asked to answer without
server-side tools), or `max_iterations` model turns were made (the response is `incomplete`).

A server-side call identical to one already made in the same response (the same function, the
same arguments) is not run again: the model reads it answered that its result is above, and is
called again, offered no server-side function this time, to answer from what it has (a small model
told to search searched for the same thing until the iteration limit).

A custom tool call whose input does not match the tool's grammar is not output: the model is
called again, seeing its call and the reason it was refused (items only the model sees, `hidden`),
at most `GRAMMAR_REPAIRS` times; a model that still does not match fails the response (a 502: the
model server's answer, not the request, is at fault). The client sees only a call that matches.

Events go out in output order (steps.py). A tool step (a listing, a call) streams live while it is the
earliest step still running; the events of later steps wait until every earlier step's are out,
so items are announced in the model's order whichever call ends first.

Pure bookkeeping over two seams: `ModelTurn` (one model call, streamed or not) and the tool
sessions of `RequestTools`. It knows no tool type and does no I/O of its own.
"""

from __future__ import annotations

import itertools
import json
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from providers.responses.client_tools import CALL_TYPES
from runtime.observability.metrics import current_metrics
from runtime.observability.tracing import current_tracing
from providers.responses.steps import UNDER_WAY, StepItem, run_steps
from providers.responses.tools import RequestTools
from providers.responses.translate import Event, StreamTranslator
from contract.tool_runtime.protocol import Citations, ItemSink, ModelCall, ToolSession
from contract.errors import UpstreamError

__all__ = ["GRAMMAR_REPAIRS", "REPEATED_CALL", "Hidden", "LoopLimits", "ModelTurn", "ToolLoop", "prepare_tools"]

log = logging.getLogger("stack")

GRAMMAR_REPAIRS = 2
"""Model turns that may follow one whose custom tool input did not match its grammar."""

Hidden = Sequence[tuple[int, Mapping[str, Any]]]
"""Items the model sees and the client does not, each with the output position it follows."""


@dataclass(frozen=True)
class LoopLimits:
    max_iterations: int = 20
    """Model turns per response; a response still calling tools after that many is incomplete."""
    parallel: int = 8
    """Server-side calls of one model turn that run at once."""

    def at_most(self, iterations: int | None) -> LoopLimits:
        """These limits with at most `iterations` model turns (a request's `max_infer_iters`)."""
        return self if iterations is None or iterations >= self.max_iterations else replace(self, max_iterations=iterations)


class ModelTurn(Protocol):
    """One call of the model, feeding `translator` and yielding the events it gives. `offered`
    is the turn's (tools, tool_choice); None: the request's own function tools, as they are.
    `hidden` is what the model's context holds beyond the response's output (usually nothing)."""

    def __call__(self, translator: StreamTranslator, offered: tuple[list[dict[str, Any]], Any] | None,
                 max_tokens: int | None, hidden: Hidden) -> AsyncIterator[Event]: ...


@dataclass
class ToolLoop:
    """Produces a response's output into `output`; `status` and `incomplete_reason` say how it ended."""

    output: list[dict[str, Any]]
    model: ModelTurn
    tools: RequestTools | None
    make_translator: Callable[[int, Callable[[str], bool], Callable[[], Citations | None] | None], StreamTranslator]
    """(first output index, is_server, citations) -> the translator of a model turn."""
    limits: LoopLimits = field(default_factory=LoopLimits)
    max_tool_calls: int | None = None
    max_output_tokens: int | None = None
    status: str = "in_progress"
    incomplete_reason: str | None = None
    usages: list[dict[str, Any]] = field(default_factory=list)
    service_tier: str | None = None
    """The tier the upstream last reported serving this response at."""
    translator: StreamTranslator | None = None
    """The model turn under way, if any: what `close` finishes when the response stops early."""
    hidden: list[tuple[int, Mapping[str, Any]]] = field(default_factory=list)
    """Refused custom tool calls and why, as the model sees them on its next turns."""
    _calls_run: int = 0
    _repairs: int = 0
    _made: set[tuple[str, str]] = field(default_factory=set)
    """(function, canonical arguments) of the server-side calls made so far in this response."""
    _repeated: bool = False
    """The last model turn repeated a call: the model is called again, told its result is above."""
    _running: list[StepItem] = field(default_factory=list)

    def preparation(self) -> AsyncGenerator[Event, None]:
        """`prepare_tools` over this loop's tools and output."""
        return prepare_tools(self.tools, self.output, self.limits.parallel)

    async def prepare(self) -> list[Event]:
        """`preparation`, run before the response starts: its events, for `events` to send first."""
        return [event async for event in self.preparation()]

    async def events(self, prepared: Iterable[Event] = ()) -> AsyncGenerator[Event, None]:
        """The response's output events (unnumbered), after the `prepared` ones (the tools'
        preparation, which ran before the response started)."""
        for event in prepared:
            yield event
        if self.tools is not None and self.tools.has_server_tools:
            pending = self.tools.pending_calls()
            if pending:
                async for event in self._run_calls([(session, call, None) for session, call in pending]):
                    yield event
        for iteration in itertools.count(1):
            if iteration > self.limits.max_iterations:
                self.status, self.incomplete_reason = "incomplete", "max_messages"
                return
            budget = self._token_budget()
            if budget is not None and budget <= 0:
                self.status, self.incomplete_reason = "incomplete", "max_output_tokens"
                return
            # After a repeated call, the model answers from what it has: no server-side function is offered.
            calls_left = (self.max_tool_calls is None or self._calls_run < self.max_tool_calls) and not self._repeated
            offered = self.tools.chat_tools(first_turn=iteration == 1, server_calls_left=calls_left) if self.tools else None
            is_server = self.tools.is_server if self.tools is not None and calls_left else _never
            citations = self.tools.citations if self.tools is not None and self.tools.has_server_tools else None
            translator = self.translator = self.make_translator(len(self.output), is_server, citations)
            async for event in self.model(translator, offered, budget, self.hidden):
                yield event
            cut = translator.finish_reason in ("length", "content_filter")
            for event in translator.finish("incomplete" if cut else "completed"):
                yield event
            self.translator = None
            self.output.extend(translator.output)
            if translator.usage:
                self.usages.append(translator.usage)
            self.service_tier = translator.service_tier or self.service_tier
            if cut:
                self.status = "incomplete"
                self.incomplete_reason = "content_filter" if translator.finish_reason == "content_filter" else "max_output_tokens"
                return
            calls = self._server_calls(translator)
            if calls:
                async for event in self._run_calls(calls):
                    yield event
            client_side = any(item["type"] == "function_call" or item["type"] in CALL_TYPES for item in translator.output)
            awaiting = any(approval is not None for _, _, approval in calls)
            if translator.rejected:
                self._refused(translator, awaiting)
                continue
            if (not calls and not self._repeated) or client_side or awaiting:
                self.status = "completed"
                return

    def _refused(self, translator: StreamTranslator, awaiting: bool) -> None:
        """Show the model its refused calls and why, for it to call again (or fail the response)."""
        first = translator.rejected[0]
        self._repairs += 1
        if self._repairs > GRAMMAR_REPAIRS or awaiting:
            raise UpstreamError(f"The model's input for the custom tool {first.item['name']!r} did not match the tool's grammar "
                                f"after {self._repairs} attempts: {first.reason}.", status_code=502, code="tool_input_mismatch")
        position = len(self.output)
        # The turn's other calls went to the client: the model's context needs an answer to each.
        for item in translator.output:
            if item["type"] == "function_call" or item["type"] in CALL_TYPES:
                self.hidden.append((position, {"type": "function_call_output", "call_id": item["call_id"],
                                               "output": "Sent to the client; its result comes later."}))
        for rejected in translator.rejected:
            self.hidden += [(position, rejected.item), (position, {
                "type": "custom_tool_call_output", "call_id": rejected.item["call_id"],
                "output": f"Refused: {rejected.reason}. Call the tool again with input that matches its grammar."})]

    def _token_budget(self) -> int | None:
        if self.max_output_tokens is None:
            return None
        used = sum(int(usage.get("completion_tokens") or 0) for usage in self.usages)
        return self.max_output_tokens - used

    def _server_calls(self, translator: StreamTranslator) -> list[tuple[ToolSession, ModelCall, dict[str, Any] | None]]:
        """The turn's server-side calls to act on, in the model's order, each with its approval
        request item when it must wait for one; calls past `max_tool_calls` are ignored, and a call
        identical to one already made in this response is not run again (`_repeat`)."""
        assert self.tools is not None or not translator.server_calls
        calls: list[tuple[ToolSession, ModelCall, dict[str, Any] | None]] = []
        self._repeated = False
        for server_call in translator.server_calls:
            if self.max_tool_calls is not None and self._calls_run >= self.max_tool_calls:
                break
            assert self.tools is not None
            arguments = "".join(server_call.arguments)
            made = (server_call.name, _canonical(arguments))
            if made in self._made:
                self._repeat(server_call.name, arguments, server_call.call_id)
                continue
            self._made.add(made)
            session, call = self.tools.server_call(server_call.name, arguments, server_call.call_id)
            self._calls_run += 1
            calls.append((session, call, session.approval_item(call)))
        return calls

    def _repeat(self, name: str, arguments: str, call_id: str) -> None:
        """A call the model already made in this response, with the same arguments: not run again
        (a small model asked to search calls the search over and over); the model sees its call
        answered that the result is above, and is called again without server-side functions."""
        assert self.tools is not None
        self._repeated = True
        tool_type = self.tools.tool_type(name)
        log.info("a model called %s (%s) again with the same arguments; not run again, told its result is above", name, tool_type)
        metrics = current_metrics()
        if metrics is not None:
            metrics.tool_calls_repeated.inc((tool_type,))
        position = len(self.output)
        self.hidden += [(position, {"type": "function_call", "call_id": call_id, "name": name, "arguments": arguments}),
                        (position, {"type": "function_call_output", "call_id": call_id, "output": REPEATED_CALL})]

    async def _run_calls(self, calls: list[tuple[ToolSession, ModelCall, dict[str, Any] | None]]) -> AsyncIterator[Event]:
        tracing = current_tracing()

        def step(session: ToolSession, call: ModelCall, approval: dict[str, Any] | None) -> Callable[[ItemSink], Awaitable[None]]:
            if approval is not None:
                return lambda sink: _ready(sink.open(approval))
            if tracing is not None and self.tools is not None:
                name = self.tools.function_name(call)
                return lambda sink: tracing.tool_call(name, call.call_id, session.run(call, sink))
            return lambda sink: session.run(call, sink)

        start = len(self.output)
        async for event in run_steps([step(*entry) for entry in calls], self.output, self.limits.parallel, self._running):
            yield event
        metrics = current_metrics()
        if metrics is not None:
            for item in self.output[start:]:
                metrics.tool_calls.inc((str(item.get("type")), str(item.get("status") or "completed")))

    def close(self, status: str = "incomplete") -> list[Event]:
        """The response stopped early (a failure, a cancel): finish whatever is still open; the
        events of the model turn's items so closed."""
        events: list[Event] = []
        if self.translator is not None:
            events = self.translator.finish(status)
            self.output.extend(self.translator.output)
            if self.translator.usage:
                self.usages.append(self.translator.usage)
            self.translator = None
        for item in self._running:
            if item.item.get("status") in UNDER_WAY:
                item.item["status"] = "incomplete"
        self._running.clear()
        return events

    def usage(self) -> dict[str, Any] | None:
        """The chat usage of every model turn, summed."""
        if not self.usages:
            return None
        if len(self.usages) == 1:
            return self.usages[0]
        total: dict[str, Any] = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0,
                                 "prompt_tokens_details": {"cached_tokens": 0}, "completion_tokens_details": {"reasoning_tokens": 0}}
        for usage in self.usages:
            for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
                total[key] += int(usage.get(key) or 0)
            total["prompt_tokens_details"]["cached_tokens"] += int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
            total["completion_tokens_details"]["reasoning_tokens"] += int(
                (usage.get("completion_tokens_details") or {}).get("reasoning_tokens") or 0)
        return total




REPEATED_CALL = "Not run again: this exact call was already made in this response, and its result is above. Answer from it."
"""What the model reads for a call it repeated."""


def _canonical(arguments: str) -> str:
    """Arguments as a call's identity: parsed JSON written with sorted keys, else the text itself."""
    try:
        return json.dumps(json.loads(arguments), sort_keys=True, separators=(",", ":"))
    except ValueError:
        return arguments


def _never(_name: str) -> bool:
    return False


async def _ready(_item: Any) -> None:
    """An approval request: opened and done at once."""


async def prepare_tools(tools: RequestTools | None, output: list[dict[str, Any]], parallel: int) -> AsyncGenerator[Event, None]:
    """Prepare the server-side tools (list an MCP server's tools...) and name the functions for
    the model; the events of the items this produces into `output`, as they come."""
    if tools is None:
        return
    steps = [step for session, _ in tools.sessions for step in session.preparations()]
    async for event in run_steps(steps, output, parallel):
        yield event
    tools.offer()
