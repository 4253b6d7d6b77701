"""Producing a prepared response: its model turns and server-side calls (the tool loop), its
events, and its end, stored.

`run` and `stream` are one path (`_produce`): a response answered whole is the same production
with its events left unread. What differs is what a failure does. Until a client has seen any of
the response (always, for one answered whole), an error is raised as the request's own: the client
gets its status, and nothing is kept of a response it never saw. After that, the response ends
`failed` with the reason, stored so, and the stream's last event says so: one epilogue for every
kind of failure (an error in OpenAI's terms, a fault of the server's own, the end of a shutdown's
grace period). A stream that ends otherwise (its client went away, the response was cancelled, the
server stopped) keeps what was produced under a terminal status.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from contract.errors import APIError
from contract.tool_runtime.protocol import Citations
from providers.responses.compaction import Compaction
from providers.responses.failures import SERVER_ERROR, SHUTDOWN_ERROR, image_error, in_responses_terms, response_error
from providers.responses.loop import LoopLimits, ToolLoop
from providers.responses.model_calls import ModelCalls
from providers.responses.persistence import Persistence
from providers.responses.sealing import ReasoningSeal
from providers.responses.tools import RequestTools, open_request_tools
from providers.responses.translate import Event, StreamTranslator
from providers.responses.turn import Turn
from providers.responses.usage import usage_from_chat
from runtime.apis.tool_runtime.router import ToolRouter

__all__ = ["ResponsesEngine"]

log = logging.getLogger("stack")


class ResponsesEngine:
    """Runs prepared turns: model calls and tools through the tool loop, their events, persistence."""

    def __init__(self, model_calls: ModelCalls, persistence: Persistence, compaction: Compaction, *, tools: ToolRouter | None = None,
                 limits: LoopLimits | None = None, seal: ReasoningSeal | None = None) -> None:
        self.model_calls = model_calls
        self.persistence = persistence
        self.compaction = compaction
        self.tools = tools
        self.limits = limits or LoopLimits()
        self.seal = seal
        self.shutting_down = False
        # The tasks streaming responses to clients, which the end of a shutdown's grace period
        # interrupts so that each client gets a last event rather than a cut connection.
        self._stream_tasks: set[asyncio.Task[Any]] = set()
        self._ending_streams = False

    async def run(self, turn: Turn) -> dict[str, Any]:
        """Produce the whole response, store it (one transaction), return it."""
        async for _ in self._produce(turn, streamed=False):  # read to its end, or ended by what it raises
            pass
        return turn.response

    def stream(self, turn: Turn) -> AsyncIterator[Event]:
        """The response's events in order; the stored copy follows along."""
        return self._produce(turn, streamed=True)

    def is_producing(self, response_id: str) -> bool:
        """Whether this process produces the response's stored copy (streaming it, or waiting for
        the database to store its end)."""
        return self.persistence.is_holding(response_id)

    async def _produce(self, turn: Turn, *, streamed: bool) -> AsyncGenerator[Event, None]:
        response = turn.response
        leased = streamed and turn.stored and not response["background"]
        if leased:
            await self.persistence.begin(turn)
        run = _Run(streamed, leased, asyncio.current_task() if streamed and not response["background"] else None, turn.tools)
        loop = self._loop(turn, run)
        if run.task is not None:
            self._stream_tasks.add(run.task)
        try:
            failure: dict[str, Any] | None = None
            try:
                if streamed:
                    response["status"] = "in_progress"
                    yield turn.event("response.created")
                    yield turn.event("response.in_progress")
                # One generator between the loop's events and the client, as before the split.
                async with contextlib.aclosing(self._events(turn, loop, run)) as events:
                    async for event in events:
                        if streamed:
                            run.opened = True
                            yield turn.numbered(event)
                            if run.task is not None and run.task is not (current := asyncio.current_task()) and current is not None:
                                run.task = self._streamed_by(run.task, current)
                _finalize(response, loop)
                await (self.persistence.end(turn) if streamed else self.persistence.save(turn))
                run.finished = True
                if streamed:
                    yield turn.event("response.incomplete" if response["status"] == "incomplete" else "response.completed")
            except APIError as error:
                failure = await self._refused_or_failed(turn, run, error)
            except Exception:
                if not streamed:
                    raise
                # A fault of the server's own or of a provider (not an error in OpenAI's terms): the client
                # still gets the response's end, kept as failed (not cancelled); the log has the cause.
                log.exception("response %s failed", response["id"])
                failure = SERVER_ERROR
            except asyncio.CancelledError:
                if not self._ending_streams or run.task is None or run.finished:
                    raise
                # The shutdown's grace period is over: this client gets the response's end, not a cut.
                run.task.uncancel()  # this task's: `_streamed_by` follows the stream from task to task
                failure = SHUTDOWN_ERROR
            if failure is not None:
                for event in loop.close():
                    yield turn.numbered(event)
                _finalize(response, loop, "failed", error=failure)
                await self.persistence.end(turn)
                run.finished = True
                yield turn.event("response.failed")
        finally:
            if streamed:
                self._leave_stream(turn, loop, run)
            elif loop.tools is not None:
                await loop.tools.aclose()

    async def _refused_or_failed(self, turn: Turn, run: _Run, error: APIError) -> dict[str, Any]:
        """An error in OpenAI's terms, raised as the request's own while the client has seen
        nothing of the response (always, for one answered whole); else the failed response's
        `error`, for the epilogue."""
        if run.streamed:  # a stream's upstream error comes with its first chunk, past the mapping in model_calls
            error = image_error(error, turn.messages()) or error
        error = in_responses_terms(error)
        if run.streamed and (run.opened or turn.response["background"]):
            return response_error(error)
        # Refused before any output (a context too long, an image a text model cannot take, a rate
        # limit). A stream's consumers hold back the opening events (runtime.apis.responses.routes),
        # so the client gets the error's own status (which the SDK retries when it may), and
        # nothing is kept of a response it never saw.
        run.finished = True
        if run.leased:
            await self.persistence.discard(turn)
        raise error from None

    def _leave_stream(self, turn: Turn, loop: ToolLoop, run: _Run) -> None:
        """However the stream ended: a response that did not finish (its client went away, it was
        cancelled, the server is stopping) keeps what was produced under a terminal status; its
        tools close and its lease is given up, outside the task (which may be cancelled)."""
        if run.task is not None:
            self._stream_tasks.discard(run.task)
        if not run.finished:
            loop.close()
            if self.shutting_down:
                _finalize(turn.response, loop, "failed", error=SHUTDOWN_ERROR)
            else:
                _finalize(turn.response, loop, "cancelled")
            self.persistence.detach(self.persistence.end(turn))
        if loop.tools is not None:
            self.persistence.detach(loop.tools.aclose())
        if run.leased:
            self.persistence.release(turn)

    async def _events(self, turn: Turn, loop: ToolLoop, run: _Run) -> AsyncGenerator[Event, None]:
        """The response's output events: the tools' preparation (run before the response started,
        or now, for a background response), the compaction of its context when the request asks
        for it and the context has grown past the threshold, then the tool loop's."""
        if turn.response["background"] and turn.tools is None:
            loop.tools = run.tools = await open_request_tools(turn.request, self.tools, turn.response["id"], turn.history, turn.input_items)
            async with contextlib.aclosing(loop.preparation()) as preparation:
                async for event in preparation:
                    yield event
        for event in turn.prepared:
            yield event
        for event in await self.compaction.automatic(turn, loop):
            yield event
        async with contextlib.aclosing(loop.events()) as events:
            async for event in events:
                yield event

    def _loop(self, turn: Turn, run: _Run) -> ToolLoop:
        sealing = self.seal is not None and "reasoning.encrypted_content" in (turn.request.include or ())
        seal = self.seal.seal if sealing and self.seal is not None else None
        with_logprobs = turn.request.wants_logprobs()

        def translator(first_index: int, is_server: Callable[[str], bool], citations: Callable[[], Citations | None] | None) -> StreamTranslator:
            # The tools are read at each model call: a background response opens them after its loop is made. (From
            # `run`, not the loop: a loop whose factory refers to it would be a reference cycle, left to the collector.)
            client_tool = run.tools.client_tool if run.tools is not None else None
            return StreamTranslator(first_output_index=first_index, with_logprobs=with_logprobs, is_server=is_server,
                                    citations=citations, seal=seal, guard=turn.guard_output, client_tool=client_tool)

        return ToolLoop(turn.response["output"], self.model_calls.for_turn(turn, run.streamed), turn.tools, translator,
                        self.limits.at_most(turn.request.max_infer_iters), max_tool_calls=turn.request.max_tool_calls, max_output_tokens=turn.request.max_output_tokens)

    def _streamed_by(self, task: asyncio.Task[Any], current: asyncio.Task[Any]) -> asyncio.Task[Any]:
        """`current` makes the stream's events now, not `task`: a consumer may make a stream's
        head in one task and the rest in another (runtime.http.sse), and shutdown must cancel the
        one that is waiting."""
        self._stream_tasks.discard(task)
        self._stream_tasks.add(current)
        return current

    def end_streams(self) -> None:
        """End every response being streamed to a client now: each is stored `failed` (the server
        is shutting down) and its client gets that as the stream's last event."""
        self.shutting_down = self._ending_streams = True
        for task in list(self._stream_tasks):
            task.cancel()

    def close(self) -> None:
        """The process is stopping: streams cut from now on end `failed`, and leases lapse."""
        self.shutting_down = True
        self.persistence.stop_renewing()


@dataclass(slots=True)
class _Run:
    """How one production is going: whether its client has seen output, whether it finished (its
    end stored, or refused), the task its stream's events are made in now, and its tools."""

    streamed: bool
    leased: bool
    task: asyncio.Task[Any] | None
    tools: RequestTools | None
    """The request's tools: the turn's, or those a background response opens when it runs."""
    opened: bool = False
    finished: bool = False


def _finalize(response: dict[str, Any], loop: ToolLoop, status: str | None = None, error: dict[str, Any] | None = None) -> None:
    """The response's end state: `status` (default: how the loop ended) and its usage."""
    status = status or loop.status
    response["status"] = status
    response["usage"] = usage_from_chat(loop.usage())
    if loop.service_tier is not None:
        response["service_tier"] = loop.service_tier
    response["error"] = error
    response["incomplete_details"] = {"reason": loop.incomplete_reason or "max_output_tokens"} if status == "incomplete" else None
    if status == "completed":
        response["completed_at"] = int(time.time())
