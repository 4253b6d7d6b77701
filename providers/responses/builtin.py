"""The built-in responses provider: the Responses API over any chat-completions model."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from contract.checks import cursor_page
from contract.errors import InvalidRequestError
from contract.files.protocol import FilesProvider
from contract.prompts.protocol import PromptsProvider
from contract.responses.models import CompactRequest, CreateResponse
from contract.safety.protocol import SafetyProvider
from contract.spec import Api, ProviderContext, ProviderSpec
from providers.responses.background import TERMINAL, Background
from providers.responses.compaction import Compaction
from providers.responses.context import ContextSource, Conversations
from providers.responses.engine import ResponsesEngine
from providers.responses.guardrails import Guardrails
from providers.responses.loop import LoopLimits
from providers.responses.model_calls import Inference, ModelCalls
from providers.responses.persistence import Persistence
from providers.responses.preparation import Preparation
from providers.responses.request import chat_request
from providers.responses.sealing import ReasoningSeal, decode_key, load_key
from providers.responses.store import ResponseStore
from providers.responses.translate import Event
from runtime.apis.tool_runtime.router import ToolRouter
from runtime.storage import every

__all__ = ["BUILTIN", "BuiltinResponses"]

log = logging.getLogger("stack")



class BuiltinResponsesConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    lease_s: float = Field(default=30.0, gt=1, description=(
        "A response being produced (in the background, or streamed) whose process has not renewed its lease for this long "
        "is taken over: a queued one is run, a running one marked failed. Leases are renewed every lease_s / 3 seconds."))
    stream_poll_s: float = Field(default=0.1, gt=0, description="How often a resumed stream looks for new events of a running background response")
    max_tool_iterations: int = Field(default=20, ge=1, description=(
        "Model turns per response in the server-side tool loop; a response still calling tools after that many ends "
        "incomplete (incomplete_details.reason: max_messages)"))
    max_parallel_tool_calls: int = Field(default=8, ge=1, description="Server-side calls of one model turn that run at once")
    reasoning_key: str | None = Field(default=None, description=(
        "The key that seals reasoning returned with include reasoning.encrypted_content: 32 bytes in base64 (`openssl rand "
        "-base64 32`); replicas must share it. Default: a key made on first use and kept in the state directory "
        "(reasoning.key, readable by its owner only)"))

    summary_model: str | None = Field(default=None, min_length=1, description=(
        "The model that writes reasoning summaries (reasoning.summary); default: the request's own model"))
    compaction_model: str | None = Field(default=None, min_length=1, description=(
        "The model that writes compaction summaries (POST /v1/responses/compact, context_management); default: the request's own model"))
    unserved_tools: Literal["reject", "omit"] = Field(default="reject", description=(
        "A request's tool of one of OpenAI's hosted types that no tool_runtime provider serves (web_search without a search "
        "backend...): `reject` answers a 400 naming it; `omit` leaves it out of the model's view and answers the rest (for "
        "clients such as the Codex CLI, which send such tools with every request). A type OpenAI does not define is a 400 either way."))

    @field_validator("reasoning_key")
    @classmethod
    def _key(cls, value: str | None) -> str | None:
        if value is not None:
            decode_key(value)
        return value


_LAST_EVENTS_S = 1.0
"""How long a follower waits for the last events of a response whose status is already final."""


class BuiltinResponses:
    """Implements contract.responses.protocol.ResponsesProvider: a request is prepared into a turn
    (`preparation`), produced by the engine (at once, or in the `background`), and stored."""

    def __init__(self, parts: Parts, config: BuiltinResponsesConfig) -> None:
        self.preparation = parts.preparation
        self.engine = parts.engine
        self.background = parts.background
        self.compaction = parts.compaction
        self.contexts = parts.contexts
        self.store = parts.store
        self.inference = parts.inference
        self.config = config
        self._following: dict[str, set[asyncio.Event]] = {}
        """The wake-up of each stream following a background response, by response id."""

    async def create_response(self, request: CreateResponse) -> dict[str, Any]:
        turn = await self.preparation.prepare(request)
        if request.background:
            return await self.background.start(turn)
        return await self.engine.run(turn)

    async def stream_response(self, request: CreateResponse) -> AsyncIterator[Event]:
        turn = await self.preparation.prepare(request)
        if request.background:
            return await self.background.start_streamed(turn)
        return self.engine.stream(turn)

    async def compact_response(self, request: CompactRequest) -> dict[str, Any]:
        return await self.compaction.compact(request)

    async def get_response(self, response_id: str) -> dict[str, Any]:
        return (await self.store.get(response_id)).response

    async def stream_stored_response(self, response_id: str, starting_after: int | None) -> AsyncIterator[Event]:
        stored = await self.store.get(response_id)
        after = -1 if starting_after is None else starting_after
        if not stored.background:
            # Only a background response keeps its event log; replaying made-up events under
            # made-up sequence numbers would mislead a client resuming at one of them (OpenAI refuses too).
            raise InvalidRequestError("This response cannot be streamed because it was not created with background=true.", param="stream")
        return self._follow(response_id, after)

    async def listen(self) -> None:
        """Wake the streams following a response when its log grows, whichever replica writes it."""
        await self.store.on_events(self._logged)

    def _logged(self, response_id: str) -> None:
        for woken in self._following.get(response_id, ()):
            woken.set()

    async def _follow(self, response_id: str, after: int) -> AsyncIterator[Event]:
        """The event log of a background response, then its new events until it ends: read again
        when the log grows (a notification), or every `stream_poll_s` when none comes (SQLite's
        other processes send none)."""
        woken = asyncio.Event()
        self._following.setdefault(response_id, set()).add(woken)
        ended_at: float | None = None
        try:
            while True:
                woken.clear()  # before the read: a notification during it is not lost
                batch = await self.store.events_after(response_id, after)
                for event in batch:
                    yield event
                    after = event["sequence_number"]
                    if event["type"] in ("response.completed", "response.incomplete", "response.failed"):
                        return
                if not batch and (await self.store.get(response_id)).status in TERMINAL:
                    # Its status is written just before its last events are logged: those are
                    # waited for a moment (a response taken over from a dead process has none).
                    now = time.monotonic()
                    ended_at = now if ended_at is None else ended_at
                    if now - ended_at >= _LAST_EVENTS_S:
                        return
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(woken.wait(), min(self.config.stream_poll_s, _LAST_EVENTS_S))
        finally:
            followers = self._following.get(response_id)
            if followers is not None:
                followers.discard(woken)
                if not followers:
                    del self._following[response_id]

    async def delete_response(self, response_id: str) -> dict[str, Any]:
        await self.store.delete(response_id)
        self.contexts.forget(response_id)
        return {"id": response_id, "object": "response.deleted", "deleted": True}

    async def list_responses(self, after: str | None, limit: int, order: str) -> dict[str, Any]:
        data, has_more = await self.store.page(after=after, limit=limit, order=order)
        return cursor_page(data, has_more)

    async def list_input_items(self, response_id: str, after: str | None, limit: int, order: str) -> dict[str, Any]:
        data, has_more = await self.store.input_items(response_id, after=after, limit=limit, order=order)
        return cursor_page(data, has_more)

    async def cancel_response(self, response_id: str) -> dict[str, Any]:
        return await self.background.cancel(response_id)

    def begin_shutdown(self) -> None:
        """A stream cut from now on was cut by the shutdown: it ends `failed`, saying so."""
        self.engine.shutting_down = True

    def end_streams(self) -> None:
        """The grace period is over: each stream still under way ends with `response.failed`."""
        self.engine.end_streams()

    async def count_input_tokens(self, request: CreateResponse) -> dict[str, Any]:
        """Exact for the model: the upstream counts the prompt of a one-token completion."""
        turn = await self.preparation.prepare(request.model_copy(update={"background": False, "stream": False}))
        try:
            offered = turn.tools.chat_tools(first_turn=True, server_calls_left=True) if turn.tools is not None else None
        finally:
            if turn.tools is not None:
                await turn.tools.aclose()
        body = {**chat_request(request, turn.messages(), stream=False, offered=offered), "max_completion_tokens": 1}
        completion = json.loads(await self.inference.chat_completion(body))
        return {"object": "response.input_tokens", "input_tokens": int((completion.get("usage") or {}).get("prompt_tokens") or 0)}


@dataclass(frozen=True)
class Parts:
    """The built-in provider's parts, each with one job, wired once by `assemble`."""

    store: ResponseStore
    inference: Inference
    contexts: ContextSource
    preparation: Preparation
    compaction: Compaction
    persistence: Persistence
    engine: ResponsesEngine
    background: Background


def assemble(inference: Inference, store: ResponseStore, *, conversations: Conversations | None = None, tools: ToolRouter | None = None,
             files: FilesProvider | None = None, prompts: PromptsProvider | None = None, safety: SafetyProvider | None = None,
             seal: ReasoningSeal | None = None, lease_s: float = 30.0,
             limits: LoopLimits | None = None, summary_model: str | None = None, compaction_model: str | None = None,
             omit_unserved: bool = False) -> Parts:
    """The parts over the APIs they use (None: not served by this stack)."""
    limits = limits or LoopLimits()
    contexts = ContextSource(store, conversations)
    guardrails = Guardrails(safety)
    preparation = Preparation(inference, contexts, guardrails, tools=tools, files=files, prompts=prompts, seal=seal,
                              omit_unserved=omit_unserved, parallel=limits.parallel)
    compaction = Compaction(inference, contexts, seal, preparation.renderers, compaction_model)
    persistence = Persistence(store, contexts, lease_s)
    engine = ResponsesEngine(ModelCalls(inference, guardrails, summary_model), persistence, compaction, tools=tools, limits=limits, seal=seal)
    background = Background(engine, preparation, store, lease_s)
    return Parts(store, inference, contexts, preparation, compaction, persistence, engine, background)


@contextlib.asynccontextmanager
async def create(context: ProviderContext[BuiltinResponsesConfig]) -> AsyncIterator[BuiltinResponses]:
    config = context.config
    store = ResponseStore(context.databases("responses"))
    await store.create_tables()
    parts = assemble(
        context.deps[Api.inference], store, conversations=context.deps.get(Api.conversations), tools=context.deps.get(Api.tool_runtime),
        files=context.deps.get(Api.files), prompts=context.deps.get(Api.prompts), safety=context.deps.get(Api.safety),
        seal=ReasoningSeal(lambda: load_key(config.reasoning_key, context.state_dir)), lease_s=config.lease_s,
        limits=LoopLimits(max_iterations=config.max_tool_iterations, parallel=config.max_parallel_tool_calls),
        summary_model=config.summary_model, compaction_model=config.compaction_model, omit_unserved=config.unserved_tools == "omit")
    service = BuiltinResponses(parts, config)
    await parts.background.recover(at_start=True)
    await parts.background.listen()
    await service.listen()
    # Takes over the responses of processes that died, once their lease lapses.
    sweeper = every(config.lease_s / 3, parts.background.recover, "the sweep for orphaned responses")
    try:
        yield service
    finally:
        sweeper.cancel()
        await close(parts)


async def close(parts: Parts) -> None:
    """Stop: streams cut from now on end failed, background work is stopped (each marks itself
    failed), and the pending writes are waited for."""
    parts.engine.close()
    await parts.background.stop()
    await parts.persistence.close()


BUILTIN = ProviderSpec(
    api=Api.responses,
    name="builtin",
    config_model=BuiltinResponsesConfig,
    factory=create,
    requires=(Api.inference,),
    optional=(Api.conversations, Api.tool_runtime, Api.files, Api.prompts, Api.safety),
    description="The Responses API over any chat-completions model: stored, chained, streamed, background",
)
