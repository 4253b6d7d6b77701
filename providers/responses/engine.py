"""Producing a response: build the model context, call inference, translate, persist.

Persistence is what makes a response safe to hand out: a streamed response is written when it is
created and again when it ends, whatever ends it (completion, the model's token limit, an upstream
failure, the client going away, a cancel), so no stored response is left `in_progress`.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol

from providers.responses.items import ChatContext, chat_messages
from providers.responses.request import chat_request
from runtime.apis.responses.models import CreateResponse, response_object
from providers.responses.store import ResponseStore, StoredResponse
from providers.responses.translate import PART_EVENTS, Event, StreamTranslator, output_from_completion, usage_from_chat
from runtime import fastjson
from runtime.apis.items import new_id, normalize_input
from runtime.errors import APIError, InvalidRequestError, NotFoundError

__all__ = ["Inference", "ResponsesEngine", "Turn"]

log = logging.getLogger("stack")

TRUNCATION_ATTEMPTS = 8
TERMINAL = frozenset({"completed", "incomplete", "failed", "cancelled"})


class Inference(Protocol):
    """What the engine needs of the inference API (its router)."""

    async def resolve(self, model_id: Any) -> Any: ...

    async def chat_completion(self, body: dict[str, Any], raw: bytes | None = None, *, echo_model: bool = True) -> bytes: ...

    async def stream_chat_completion(
        self, body: dict[str, Any], raw: bytes | None = None, *, echo_model: bool = True
    ) -> AsyncIterator[bytes]: ...


class Conversations(Protocol):
    """What the engine needs of the conversations API."""

    async def conversation_items(self, conversation_id: str) -> list[dict[str, Any]]: ...

    async def append_items(self, conversation_id: str, items: Sequence[dict[str, Any]]) -> None: ...


@dataclass
class Turn:
    """One response being produced."""

    request: CreateResponse
    response: dict[str, Any]
    input_items: list[dict[str, Any]]
    history: list[dict[str, Any]]
    """Items before this turn's input: the previous_response_id chain or the conversation."""
    ancestors: list[str]
    history_chat: ChatContext | None = None
    """`history` already folded into chat messages, when the context cache had it."""
    sequence: Callable[[], int] = field(default_factory=lambda: itertools.count().__next__)
    chat: ChatContext | None = None
    """History and input folded into chat messages, once `messages()` has been asked for."""

    @property
    def stored(self) -> bool:
        return bool(self.response["store"])

    @property
    def droppable(self) -> int:
        """How many of the oldest context items truncation may drop: all but the newest."""
        return max(0, len(self.history) + len(self.input_items) - 1)

    def messages(self, dropped: int = 0) -> list[dict[str, Any]]:
        """The chat messages of the model context, without its `dropped` oldest items."""
        if dropped:
            return chat_messages([*self.history, *self.input_items][dropped:], self.request.instructions)
        if self.chat is None:
            history = self.history_chat if self.history_chat is not None else ChatContext().extend(self.history)
            self.chat = history.extend(self.input_items)
        return self.chat.messages_with(self.request.instructions)


@dataclass(frozen=True)
class Context:
    """What a turn continues from: the previous responses' ids (root first) and their items,
    and, when known, those items already folded into chat messages."""

    ancestors: list[str]
    items: list[dict[str, Any]]
    chat: ChatContext | None = None


class ResponsesEngine:
    def __init__(self, inference: Inference, store: ResponseStore, conversations: Conversations | None = None,
                 lease_s: float = 30.0) -> None:
        self.inference = inference
        self.store = store
        self.conversations = conversations
        self.lease_s = lease_s
        self._tasks: set[asyncio.Task[Any]] = set()
        self._background: dict[str, asyncio.Task[Any]] = {}
        # Stored responses this process is streaming to a client; their leases are renewed
        # together, so that if the process dies the sweep marks them failed.
        self._streaming: set[str] = set()
        self._renewer: asyncio.Task[None] | None = None
        self._contexts: OrderedDict[str, Context] = OrderedDict()
        self.shutting_down = False

    # --- preparing a turn ------------------------------------------------------------------

    async def prepare(self, request: CreateResponse) -> Turn:
        """Check the request and gather its context; every client mistake is raised here, before
        anything is streamed or stored."""
        request.check()
        await self.inference.resolve(request.model)
        input_items = normalize_input(request.input)
        context = Context([], [])
        if request.previous_response_id:
            context = await self._chain(request.previous_response_id)
        elif request.conversation_id:
            context = Context([], await self._conversation(request.conversation_id))
        input_items = await self._resolve_references(input_items)
        status = "queued" if request.background else "in_progress"
        response = response_object(request, new_id("resp"), status, conversation_id=request.conversation_id)
        return Turn(request, response, input_items, context.items, context.ancestors, context.chat)

    async def _chain(self, previous_id: str) -> Context:
        """The ancestors a response continuing `previous_id` has, and its context items."""
        cached = self._contexts.get(previous_id)
        if cached is not None:
            self._contexts.move_to_end(previous_id)
            return cached
        try:
            previous, history = await self.store.context(previous_id)
        except NotFoundError:
            raise NotFoundError(
                f"Previous response with id '{previous_id}' not found. Only stored responses (store=true) can be continued.",
                param="previous_response_id", code="previous_response_not_found",
            ) from None
        return Context([*previous.ancestors, previous.id], history)

    def _remember(self, turn: Turn) -> None:
        """Keep a finished stored response's context in memory, so the next turn of its chain
        reads nothing from the store (other processes, and evicted entries, read it there)."""
        if not turn.stored or turn.response["status"] not in ("completed", "incomplete"):
            return
        response_id = turn.response["id"]
        output = turn.response["output"]
        chat = turn.chat.extend(output) if turn.chat is not None else None
        self._contexts[response_id] = Context([*turn.ancestors, response_id], [*turn.history, *turn.input_items, *output], chat)
        while len(self._contexts) > CONTEXT_CACHE_SIZE:
            self._contexts.popitem(last=False)

    def forget(self, response_id: str) -> None:
        self._contexts.pop(response_id, None)

    async def _history(self, request: CreateResponse) -> list[dict[str, Any]]:
        if request.previous_response_id:
            return (await self._chain(request.previous_response_id)).items
        if request.conversation_id:
            return await self._conversation(request.conversation_id)
        return []

    async def _conversation(self, conversation_id: str) -> list[dict[str, Any]]:
        if self.conversations is None:
            raise InvalidRequestError(
                "'conversation' needs the conversations API: add a conversations provider to this stack.", param="conversation", code="invalid_value"
            )
        try:
            return await self.conversations.conversation_items(conversation_id)
        except NotFoundError as error:
            raise NotFoundError(error.message, param="conversation", code="conversation_not_found") from None

    async def _extend_conversation(self, turn: Turn) -> None:
        """A finished turn (completed, or cut by max_output_tokens) appends its input and output to
        its conversation; a failed or cancelled one appends nothing, so retrying it is clean."""
        conversation_id = turn.request.conversation_id
        if self.conversations is None or not conversation_id or not turn.stored:
            return
        if turn.response["status"] in ("completed", "incomplete"):
            await self.conversations.append_items(conversation_id, [*turn.input_items, *turn.response["output"]])

    async def _resolve_references(self, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        wanted = [item["id"] for item in items if item["type"] == "item_reference"]
        if not wanted:
            return items
        found = await self.store.items_by_id(wanted)
        missing = [item_id for item_id in wanted if item_id not in found]
        if missing:
            raise NotFoundError(f"Item with id '{missing[0]}' not found.", param="input", code="item_not_found")
        return [found[item["id"]] if item["type"] == "item_reference" else item for item in items]

    # --- calling the model -----------------------------------------------------------------

    async def _with_truncation(self, turn: Turn, call: Callable[[dict[str, Any]], Awaitable[Any]], stream: bool) -> Any:
        """Call the model; with truncation=auto, drop the oldest history items while the
        upstream says the context is too long."""
        dropped = 0
        for _ in range(TRUNCATION_ATTEMPTS):
            body = chat_request(turn.request, turn.messages(dropped), stream=stream)
            try:
                return await call(body)
            except APIError as error:
                if error.code != "context_length_exceeded" or turn.request.truncation != "auto" or dropped >= turn.droppable:
                    raise
                dropped = min(turn.droppable, dropped + max(1, (turn.droppable - dropped + 3) // 4))
                log.info("response %s: context too long, dropping the %d oldest items", turn.response["id"], dropped)
        raise InvalidRequestError("The input is too long for the model's context, even after truncation.", code="context_length_exceeded")

    # --- non-streamed ----------------------------------------------------------------------

    async def run(self, turn: Turn) -> dict[str, Any]:
        """Produce the whole response, store it (one transaction), return it."""
        # The engine reads only the output: the upstream's model name need not be swapped back.
        raw = await self._with_truncation(turn, partial(self.inference.chat_completion, echo_model=False), stream=False)
        translator = output_from_completion(fastjson.loads(raw), with_logprobs=turn.request.wants_logprobs())
        status = _status(translator.finish_reason)
        translator.finish("incomplete" if status == "incomplete" else "completed")
        _finalize(turn.response, status, translator)
        if turn.stored:
            await self.store.insert(turn.response, ancestors=turn.ancestors, input_items=turn.input_items, output_items=turn.response["output"])
            self._remember(turn)
        await self._extend_conversation(turn)
        return turn.response

    # --- streamed --------------------------------------------------------------------------

    async def stream(self, turn: Turn) -> AsyncIterator[Event]:
        """The response's events in order; the stored copy follows along."""
        response = turn.response
        leased = turn.stored and not response["background"]
        if leased:
            await self.store.insert(dict(response), ancestors=turn.ancestors, input_items=turn.input_items)
            self._lease(response["id"])
        response["status"] = "in_progress"
        yield self._event(turn, "response.created")
        yield self._event(turn, "response.in_progress")
        translator = StreamTranslator(with_logprobs=turn.request.wants_logprobs())
        finished = False
        try:
            chunks = await self._with_truncation(turn, partial(self.inference.stream_chat_completion, echo_model=False), stream=True)
            async for chunk in chunks:
                for event in translator.feed(fastjson.loads(chunk)):
                    yield self._numbered(turn, event)
            status = _status(translator.finish_reason)
            for event in translator.finish("incomplete" if status == "incomplete" else "completed"):
                yield self._numbered(turn, event)
            _finalize(response, status, translator)
            await self._persist_end(turn)
            finished = True
            yield self._event(turn, "response.incomplete" if status == "incomplete" else "response.completed")
        except APIError as error:
            for event in translator.finish("incomplete"):
                yield self._numbered(turn, event)
            _finalize(response, "failed", translator, error=response_error(error))
            await self._persist_end(turn)
            finished = True
            yield self._event(turn, "response.failed")
        finally:
            if not finished:
                # The client went away, the response was cancelled, or the server is stopping:
                # keep what was produced, under a terminal status.
                translator.finish("incomplete")
                if self.shutting_down:
                    _finalize(response, "failed", translator, error=SHUTDOWN_ERROR)
                else:
                    _finalize(response, "cancelled", translator)
                self._detach(self._persist_end(turn))
            if leased:
                self._streaming.discard(response["id"])

    def _event(self, turn: Turn, kind: str) -> Event:
        return {"type": kind, "sequence_number": turn.sequence(), "response": _snapshot(turn.response)}

    def _numbered(self, turn: Turn, event: Event) -> Event:
        # The translator's events are fresh dicts: numbered in place.
        event["sequence_number"] = turn.sequence()
        if event["type"] in PART_EVENTS:
            event["response_id"] = turn.response["id"]
        return event

    async def _persist_end(self, turn: Turn) -> None:
        if not turn.stored:
            return
        # A background response may have been cancelled meanwhile: the cancel's status wins,
        # but the output produced so far is still kept.
        if turn.response["background"] and turn.response["status"] != "cancelled":
            if await self.store.finish(turn.response, turn.response["output"], only_if_status=["in_progress"]):
                self._remember(turn)
                await self._extend_conversation(turn)
                return
            turn.response["status"] = "cancelled"
        await self.store.finish(turn.response, turn.response["output"])
        self._remember(turn)
        await self._extend_conversation(turn)

    def _lease(self, response_id: str) -> None:
        self._streaming.add(response_id)
        if self._renewer is None:
            self._renewer = asyncio.get_running_loop().create_task(self._renew_leases())

    async def _renew_leases(self) -> None:
        while True:
            await asyncio.sleep(self.lease_s / 3)
            if self._streaming:
                try:
                    await self.store.renew_leases(list(self._streaming))
                except Exception:
                    log.exception("could not renew the leases of %d streamed responses", len(self._streaming))

    def _detach(self, work: Coroutine[Any, Any, Any]) -> None:
        """Run `work` outside the current (possibly cancelled) task, and keep it until it ends."""
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # --- background ------------------------------------------------------------------------

    async def start_background(self, turn: Turn) -> dict[str, Any]:
        """Store the response as queued and produce it after the request returns."""
        await self.store.insert(dict(turn.response), ancestors=turn.ancestors, input_items=turn.input_items,
                                request=turn.request.model_dump(mode="json"))
        self.spawn_background(turn)
        return dict(turn.response)

    def spawn_background(self, turn: Turn) -> None:
        task = asyncio.get_running_loop().create_task(self._run_background(turn))
        self._background[turn.response["id"]] = task
        task.add_done_callback(lambda _: self._background.pop(turn.response["id"], None))

    async def _run_background(self, turn: Turn) -> None:
        response_id = turn.response["id"]
        started = dict(turn.response, status="in_progress")
        if not await self.store.set_status(response_id, "in_progress", started, only_if_status=["queued"]):
            return  # cancelled before it started
        batch: list[Event] = []
        heartbeat = self._detached_heartbeat(response_id)
        try:
            async for event in self.stream(turn):
                batch.append(event)
                if event["type"].startswith(("response.output_item.", "response.completed", "response.failed", "response.incomplete", "response.created")):
                    await self.store.append_events(response_id, batch)
                    batch = []
        except asyncio.CancelledError:
            await asyncio.shield(self.store.append_events(response_id, batch))
            raise
        finally:
            heartbeat.cancel()

    def _detached_heartbeat(self, response_id: str) -> asyncio.Task[None]:
        current = asyncio.current_task()

        async def beat() -> None:
            while True:
                await asyncio.sleep(self.lease_s / 3)
                if await self.store.heartbeat(response_id) == "cancelled" and current is not None:
                    current.cancel()  # cancelled by another process
                    return

        return asyncio.get_running_loop().create_task(beat())

    async def cancel(self, response_id: str) -> dict[str, Any]:
        stored = await self.store.get(response_id)
        if not stored.background:
            raise InvalidRequestError(
                "Cannot cancel a synchronous response: it was not created with background=true, so it cannot be cancelled.",
                param="response_id", code="not_cancellable",
            )
        if stored.status in TERMINAL:
            return stored.response
        cancelled = {**stored.response, "status": "cancelled"}
        await self.store.set_status(response_id, "cancelled", cancelled, only_if_status=["queued", "in_progress"])
        task = self._background.get(response_id)
        if task is not None:
            task.cancel()
            await asyncio.wait([task], timeout=5)
        return (await self.store.get(response_id)).response

    async def recover(self) -> None:
        """Resume queued background responses nobody is running; fail those (background or
        streamed) that were being produced when their process died (their lease lapsed)."""
        for stored in await self.store.orphaned(time.time() - self.lease_s):
            if stored.id in self._background or stored.id in self._streaming:
                continue
            if stored.status == "queued" and stored.request is not None:
                try:
                    request = CreateResponse.model_validate(stored.request)
                    history = await self._history(request)
                except (APIError, ValueError) as error:
                    # Its request no longer passes (a newer rule) or its context is gone (the
                    # previous response was deleted): failed, rather than stopping the sweep.
                    reason = error.message if isinstance(error, APIError) else "its stored request is no longer valid"
                    await self._fail_orphan(stored, f"This background response could not be resumed: {reason}")
                    continue
                turn = Turn(request, stored.response, await self.store.items_of(stored.id, "input"), history, stored.ancestors)
                log.info("resuming queued background response %s", stored.id)
                self.spawn_background(turn)
            else:
                what = "background response was running" if stored.background else "response was being streamed"
                await self._fail_orphan(stored, f"The server stopped while this {what}.")

    async def _fail_orphan(self, stored: StoredResponse, message: str) -> None:
        failed = {**stored.response, "status": "failed", "error": {"code": "server_error", "message": message}}
        await self.store.set_status(stored.id, "failed", failed, only_if_status=["queued", "in_progress"])
        log.warning("response %s marked failed: %s", stored.id, message)

    async def close(self) -> None:
        """Stop background work (each marks itself failed) and wait for pending writes."""
        self.shutting_down = True
        if self._renewer is not None:
            self._renewer.cancel()
        running = list(self._background.values())
        for task in running:
            task.cancel()
        if running:
            await asyncio.wait(running, timeout=10)
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=10)


CONTEXT_CACHE_SIZE = 1024
SHUTDOWN_ERROR = {"code": "server_error", "message": "The server shut down before this response finished."}


def response_error(error: APIError) -> dict[str, Any]:
    """A failed response's `error`. Its `code` is one of the Responses API's (clients match on
    that closed set): the upstream's own when it is one of them (an image error, say), else one
    chosen by status, with the upstream's code kept in the message."""
    if error.code in RESPONSE_ERROR_CODES:
        code = error.code
    elif error.status == 429:
        code = "rate_limit_exceeded"
    elif 400 <= error.status < 500:
        code = "invalid_prompt"
    else:
        code = "server_error"
    detail = f" ({error.code})" if error.code and error.code != code else ""
    return {"code": code, "message": f"{error.message}{detail}"}


# The `code` values of a Response's `error` (openai.types.responses.ResponseError).
RESPONSE_ERROR_CODES = frozenset({
    "server_error", "rate_limit_exceeded", "invalid_prompt", "data_residency_mismatch", "bio_policy",
    "misalignment_policy_violation", "vector_store_timeout", "invalid_image", "invalid_image_format",
    "invalid_base64_image", "invalid_image_url", "image_too_large", "image_too_small", "image_parse_error",
    "image_content_policy_violation", "invalid_image_mode", "image_file_too_large", "unsupported_image_media_type",
    "empty_image_file", "failed_to_download_image", "image_file_not_found",
})


def _status(finish_reason: str | None) -> str:
    return "incomplete" if finish_reason == "length" else "completed"


def _finalize(response: dict[str, Any], status: str, translator: StreamTranslator, error: dict[str, Any] | None = None) -> None:
    response["status"] = status
    response["output"] = translator.output
    response["usage"] = usage_from_chat(translator.usage)
    response["error"] = error
    response["incomplete_details"] = {"reason": "max_output_tokens"} if status == "incomplete" else None
    if status == "completed":
        response["completed_at"] = time.time()


def _snapshot(response: dict[str, Any]) -> dict[str, Any]:
    return {**response, "output": list(response["output"])}
