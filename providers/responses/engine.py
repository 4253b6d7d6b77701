"""Producing a response: build the model context, call inference, translate, persist.

Persistence is what makes a response safe to hand out: a streamed response is written when it is
created and again when it ends, whatever ends it (completion, the model's token limit, an upstream
failure, the client going away, a cancel), so no stored response is left `in_progress`.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import re
import time
from collections import OrderedDict
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal, Protocol

from providers.responses.background import STORE_RETRY_S, Background
from providers.responses.compaction import compaction_summary, estimated_tokens, kept_messages, try_compaction_summary
from providers.responses.files import with_files_read
from providers.responses.items import ChatContext, Renderer, Reveal, chat_messages
from providers.responses.loop import Hidden, LoopLimits, ModelTurn, ToolLoop
from providers.responses.request import chat_request
from providers.responses.store import ResponseStore
from providers.responses.tools import RequestTools, check_server_tools, public_tools, served_only
from providers.responses.translate import PART_EVENTS, Event, StreamTranslator, usage_from_chat
from providers.responses.prompting import expand_prompt
from providers.responses.sealing import ReasoningSeal
from providers.responses.summaries import summarize, summary_events
from runtime import fastjson
from runtime.apis.items import new_id, normalize_input
from runtime.apis.files.protocol import FilesProvider
from runtime.apis.prompts.protocol import PromptsProvider
from runtime.apis.safety.guard import flagged_outputs, guard_input
from runtime.apis.safety.protocol import SafetyProvider
from runtime.apis.responses.models import CompactRequest, CreateResponse, response_object
from runtime.apis.tool_runtime.protocol import Citations, ToolContext
from runtime.apis.tool_runtime.router import ToolRouter
from runtime.errors import APIError, InvalidRequestError, NotFoundError, ServiceUnavailableError, UpstreamError
from runtime.storage import StorageUnavailableError, when_back

__all__ = ["Inference", "ResponsesEngine", "Turn"]

log = logging.getLogger("stack")

TRUNCATION_ATTEMPTS = 8


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


OUTPUT_BATCH_CHARS = 400  # text held before the output guardrail checks it: a few sentences, not every token


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
    renderers: Mapping[str, Renderer] = field(default_factory=dict)
    reveal: Reveal | None = None
    tools: RequestTools | None = None
    """The request's tools, when it has server-side ones."""
    prepared: list[Event] | None = None
    """The events of the tools' preparation, when it ran before the response started."""
    seen: tuple[list[dict[str, Any]], list[dict[str, Any]]] | None = None
    """History and input as the model sees them, when files named by id had to be read in."""
    sequence: Callable[[], int] = field(default_factory=lambda: itertools.count().__next__)
    chat: ChatContext | None = None
    """History and input folded into chat messages, once `messages()` has been asked for."""
    refusal: str | None = None
    """Set when the input guardrail flagged this turn's input: the answer is this refusal, and no
    model sees the input."""

    @property
    def stored(self) -> bool:
        return bool(self.response["store"])

    @property
    def droppable(self) -> int:
        """How many of the oldest context items truncation may drop: all but the newest input."""
        return max(0, len(self.history) + len(self.input_items) - 1)

    def messages(self, dropped: int = 0, hidden: Hidden = ()) -> list[dict[str, Any]]:
        """The chat messages of the model context (and of the output so far, in a tool loop, with
        the `hidden` items only the model sees), without its `dropped` oldest items. Files named by
        id read as their content (`seen`)."""
        output = self.response["output"]
        if hidden:
            output = _with_hidden(output, hidden)
        history, input_items = self.seen if self.seen is not None else (self.history, self.input_items)
        if dropped:
            return chat_messages([*history, *input_items, *output][dropped:], self.request.instructions, self.renderers, self.reveal)
        if self.chat is None:
            base = (self.history_chat if self.history_chat is not None
                    else ChatContext(renderers=self.renderers, reveal=self.reveal).extend(history))
            self.chat = base.extend(input_items)
        return (self.chat.extend(output) if output else self.chat).messages_with(self.request.instructions)


def _with_hidden(output: Sequence[dict[str, Any]], hidden: Hidden) -> list[dict[str, Any]]:
    merged: list[dict[str, Any]] = []
    start = 0
    for position, item in hidden:
        merged += output[start:position]
        start = max(start, position)
        merged.append(dict(item))
    return merged + list(output[start:])


@dataclass(frozen=True)
class Context:
    """What a turn continues from: the previous responses' ids (root first) and their items,
    and, when known, those items already folded into chat messages."""

    ancestors: list[str]
    items: list[dict[str, Any]]
    chat: ChatContext | None = None


class ResponsesEngine:
    def __init__(self, inference: Inference, store: ResponseStore, conversations: Conversations | None = None,
                 lease_s: float = 30.0, tools: ToolRouter | None = None, limits: LoopLimits | None = None,
                 files: FilesProvider | None = None, seal: ReasoningSeal | None = None, summary_model: str | None = None,
                 prompts: PromptsProvider | None = None, safety: SafetyProvider | None = None, omit_unserved: bool = False,
                 compaction_model: str | None = None) -> None:
        self.inference = inference
        self.store = store
        self.conversations = conversations
        self.lease_s = lease_s
        self.tools = tools
        self.files = files
        self.limits = limits or LoopLimits()
        self.renderers: Mapping[str, Renderer] = tools.renderers if tools is not None else {}
        self.seal = seal
        self.summary_model = summary_model
        self.prompts = prompts
        self.safety = safety
        self.omit_unserved = omit_unserved
        self.compaction_model = compaction_model
        self._tasks: set[asyncio.Task[Any]] = set()
        self.background = Background(self)
        # Stored responses this process is streaming to a client; their leases are renewed
        # together, so that if the process dies the sweep marks them failed.
        self._streaming: set[str] = set()
        # Responses that ended while the database was away, their end stored once it is back.
        self._persisting: set[str] = set()
        self._renewer: asyncio.Task[None] | None = None
        self._contexts: OrderedDict[str, Context] = OrderedDict()
        self.shutting_down = False
        # The tasks streaming responses to clients, which the end of a shutdown's grace period
        # interrupts so that each client gets a last event rather than a cut connection.
        self._stream_tasks: set[asyncio.Task[Any]] = set()
        self._ending_streams = False

    # --- preparing a turn ------------------------------------------------------------------

    async def prepare(self, request: CreateResponse) -> Turn:
        """Check the request and gather its context; every client mistake is raised here, before
        anything is streamed or stored. Server-side tools are opened and prepared here too (an
        MCP server that cannot list its tools is a 424), except for a background response, which
        prepares them when it runs."""
        request.check()
        prompt = None
        if request.prompt is not None:
            request, prompt = await expand_prompt(request, self.prompts)
        asked = request
        if self.omit_unserved:
            request = served_only(request, self.tools)
        await check_server_tools(request, self.tools)
        self.guarded(request, "input")  # guardrails named that this server cannot run: refused before any work
        await self.inference.resolve(request.model)
        input_items = normalize_input(request.input)
        context = Context([], [])
        if request.previous_response_id:
            context = await self._chain(request.previous_response_id)
        elif request.conversation_id:
            context = Context([], await self._conversation(request.conversation_id))
        input_items = await self._resolve_references(input_items)
        self._check_sealed(input_items)
        status = "queued" if request.background else "in_progress"
        response = response_object(request, new_id("resp"), status, conversation_id=request.conversation_id)
        response["tools"] = public_tools(asked, self.tools)[0]
        if prompt is not None:
            response["prompt"] = prompt
        turn = Turn(request, response, input_items, context.items, context.ancestors, context.chat, self.renderers,
                    self.seal.reveal if self.seal is not None else None)
        await self.check_input(turn)
        await self.read_files(turn)
        if not request.background:
            await self.open_tools(turn)
            if turn.tools is not None:
                try:
                    turn.prepared = await self._loop(turn, stream=False).prepare()
                except BaseException:
                    await turn.tools.aclose()
                    raise
        return turn

    def guarded(self, request: CreateResponse, side: Literal["input", "output"]) -> bool:
        """Whether the guardrail of `side` checks this request: run.yaml switches it on for every
        request, or the request names the safety provider's guardrails (OGX's `guardrails`, both
        sides), which must exist."""
        names = request.guardrail_names()
        if names:
            if self.safety is None:
                raise ServiceUnavailableError("This request names guardrails, but this server has no safety provider to run them: add "
                                              "one under providers.safety in run.yaml, or remove 'guardrails' from the request.",
                                              param="guardrails", code="no_active_provider")
            known = self.safety.guardrails.names
            for index, name in enumerate(names):
                if name not in known:
                    raise InvalidRequestError(f"Invalid value for 'guardrails[{index}]': no guardrail is named {name[:80]!r} on this "
                                              f"server. Its safety provider answers to: {', '.join(known) or 'no name'}.",
                                              param=f"guardrails[{index}]", code="invalid_value")
            return True
        return self.safety is not None and bool(getattr(self.safety.guardrails, side))

    async def check_input(self, turn: Turn) -> None:
        """The input guardrail, when it checks this turn: a flagged input's refusal is set on the turn."""
        if self.safety is not None and self.guarded(turn.request, "input"):
            turn.refusal = await guard_input(self.safety, turn.request.instructions, turn.input_items)

    def _check_sealed(self, input_items: Sequence[Mapping[str, Any]]) -> None:
        """Encrypted reasoning sent back must be this server's, unaltered: a 400 naming the item if not."""
        for index, item in enumerate(input_items):
            compaction = item.get("type") == "compaction"
            if (item.get("type") == "reasoning" and item.get("encrypted_content") is not None) or compaction:
                if self.seal is None:
                    raise InvalidRequestError(f"Encrypted content in 'input[{index}]' cannot be read: this server seals none.",
                                              param=f"input[{index}].encrypted_content", code="invalid_encrypted_content")
                opened = self.seal.open_compaction if compaction else self.seal.open
                opened(item.get("encrypted_content"), f"input[{index}].encrypted_content")

    async def read_files(self, turn: Turn) -> None:
        """Read in the files the context names by id, for the model (the stored items keep the
        ids). Found while the context is converted, which is done here once and then reused."""
        turn.messages()
        if turn.chat is not None and turn.chat.file_ids:
            history = turn.history if turn.history_chat is None else []  # a cached context was read in already
            turn.seen = (await with_files_read(history, self.files) if history else turn.history,
                         await with_files_read(turn.input_items, self.files))
            turn.chat = None

    async def open_tools(self, turn: Turn) -> None:
        tools = turn.request.tools or ()
        if any(tool.get("type") != "function" or tool.get("defer_loading") for tool in tools) or (tools and any(
                item.get("type") == "tool_search_output" for item in (*turn.history, *turn.input_items))):
            context = ToolContext(turn.response["id"], turn.history, turn.input_items)
            turn.tools = await RequestTools.open(turn.request, self.tools, context)

    def _loop(self, turn: Turn, *, stream: bool) -> ToolLoop:
        def translator(first_index: int, is_server: Callable[[str], bool], citations: Callable[[], Citations | None] | None) -> StreamTranslator:
            # The request's tools are read here, at each model call: a background response opens them after its loop is made.
            client_tool = turn.tools.client_tool if turn.tools is not None else None
            return StreamTranslator(first_output_index=first_index, with_logprobs=turn.request.wants_logprobs(), is_server=is_server,
                                    citations=citations, seal=seal, guard=guard, client_tool=client_tool)

        guard = self.guarded(turn.request, "output")

        sealing = self.seal is not None and "reasoning.encrypted_content" in (turn.request.include or ())
        seal = self.seal.seal if sealing and self.seal is not None else None

        return ToolLoop(turn.response["output"], self._model_turn(turn, stream), turn.tools, translator, self.limits,
                        max_tool_calls=turn.request.max_tool_calls, max_output_tokens=turn.request.max_output_tokens)

    async def _chain(self, previous_id: str) -> Context:
        """The ancestors a response continuing `previous_id` has, and its context items."""
        cached = self._contexts.get(previous_id)
        # Trusted only while the response is there for this caller: another replica may have
        # deleted it, and a caller the access policy lets read it may chain from it too.
        if cached is not None and await self.store.readable(previous_id):
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

    def is_producing(self, response_id: str) -> bool:
        """Whether this process is producing the response (streaming it, in the background, or
        waiting for the database to store its end)."""
        return response_id in self._streaming or response_id in self._persisting or self.background.is_running(response_id)

    async def history(self, request: CreateResponse) -> list[dict[str, Any]]:
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

    async def _with_truncation(self, turn: Turn, call: Callable[[dict[str, Any]], Awaitable[Any]], stream: bool,
                               offered: tuple[list[dict[str, Any]], Any] | None = None, max_tokens: int | None = None,
                               hidden: Hidden = ()) -> Any:
        """Call the model; with truncation=auto, drop the oldest history items while the
        upstream says the context is too long."""
        dropped = 0
        for _ in range(TRUNCATION_ATTEMPTS):
            body = chat_request(turn.request, turn.messages(dropped, hidden), stream=stream, offered=offered, max_tokens=max_tokens)
            try:
                return await call(body)
            except APIError as error:
                image = image_error(error, body["messages"])
                if image is not None:
                    raise image from None
                if error.code != "context_length_exceeded" or turn.request.truncation != "auto" or dropped >= turn.droppable:
                    raise
                dropped = min(turn.droppable, dropped + max(1, (turn.droppable - dropped + 3) // 4))
                log.info("response %s: context too long, dropping the %d oldest items", turn.response["id"], dropped)
        raise InvalidRequestError("The input is too long for the model's context, even after truncation.", code="context_length_exceeded")

    def _model_turn(self, turn: Turn, stream: bool) -> ModelTurn:
        """One model call of `turn`'s tool loop, streamed or not (the engine reads only the output,
        so the upstream's model name need not be swapped back)."""
        reasoning = turn.request.reasoning or {}
        style = str(reasoning.get("summary") or reasoning.get("generate_summary") or "")
        if turn.refusal is not None:
            refusal = turn.refusal

            async def refuse(translator: StreamTranslator, offered: tuple[list[dict[str, Any]], Any] | None,
                             max_tokens: int | None, hidden: Hidden) -> AsyncIterator[Event]:
                # The refusal in place of the model's answer, through the same events a model's refusal makes.
                for event in translator.feed({"choices": [{"index": 0, "delta": {"role": "assistant", "refusal": refusal},
                                                           "finish_reason": "stop"}]}):
                    yield event

            return refuse

        async def call(translator: StreamTranslator, offered: tuple[list[dict[str, Any]], Any] | None,
                       max_tokens: int | None, hidden: Hidden) -> AsyncIterator[Event]:
            async for event in upstream(translator, offered, max_tokens, hidden):
                if event["type"] == "response.output_item.done" and event["item"]["type"] == "reasoning":
                    for summary_event in await self._summary(turn, event["item"], event["output_index"], style, translator):
                        yield summary_event
                yield event

        async def upstream(translator: StreamTranslator, offered: tuple[list[dict[str, Any]], Any] | None,
                           max_tokens: int | None, hidden: Hidden) -> AsyncIterator[Event]:
            if not stream:
                raw = await self._with_truncation(turn, partial(self.inference.chat_completion, echo_model=False), False, offered, max_tokens, hidden)
                for event in translator.feed_completion(_upstream_json(raw)):
                    yield event
                for event in await self._check_rest(translator):
                    yield event
                return
            chunks = await self._with_truncation(turn, partial(self.inference.stream_chat_completion, echo_model=False), True, offered, max_tokens, hidden)
            if not translator.guard:
                async for chunk in chunks:
                    for event in translator.feed(_upstream_json(chunk)):
                        yield event
                return
            # A batch is checked while the answer goes on streaming into the hold; its events are
            # released once its check is back (the client waits for one check, not for each).
            pending: tuple[asyncio.Task[bool], int] | None = None
            try:
                async for chunk in chunks:
                    for event in translator.feed(_upstream_json(chunk)):  # what is not held (nothing unchecked before it)
                        yield event
                    if pending is not None and pending[0].done():
                        for event in self._settle(translator, pending):
                            yield event
                        pending = None
                        if translator.blocked:
                            return  # closes the upstream's stream: the rest of a flagged answer is not read
                    if pending is None and len(translator.unchecked) >= OUTPUT_BATCH_CHARS:
                        pending = (asyncio.ensure_future(self._flagged(translator.unchecked)), translator.held)
                if pending is not None:
                    await asyncio.wait([pending[0]])
                    for event in self._settle(translator, pending):
                        yield event
                    pending = None
                    if translator.blocked:
                        return
            finally:
                if pending is not None:
                    pending[0].cancel()
            for event in await self._check_rest(translator):
                yield event

        return call if style else upstream  # no layer between the upstream and the loop unless summaries are asked for

    async def _flagged(self, text: str) -> bool:
        """Whether the output guardrail flags `text` (raises the 503 when the check fails closed)."""
        assert self.safety is not None
        return (await flagged_outputs(self.safety, [text]))[0]

    def _settle(self, translator: StreamTranslator, pending: tuple[asyncio.Task[bool], int]) -> list[Event]:
        """The events a finished check covers: released, or the answer blocked."""
        task, count = pending
        if task.exception() is not None:
            translator.block()
            raise task.exception()  # type: ignore[misc]
        return translator.block() if task.result() else translator.release(count)

    async def _check_rest(self, translator: StreamTranslator) -> list[Event]:
        """The output guardrail on all that is still held once the answer has ended: released, or
        the answer blocked (held text dropped, the answer ended as content_filter)."""
        if not translator.guard or translator.blocked:
            return []
        if not translator.unchecked.strip():
            return translator.release()
        check = asyncio.ensure_future(self._flagged(translator.unchecked))
        with contextlib.suppress(Exception):  # _settle blocks the answer, then raises it
            await check
        return self._settle(translator, (check, translator.held))

    async def _summary(self, turn: Turn, item: dict[str, Any], output_index: int, style: str,
                       translator: StreamTranslator) -> list[Event]:
        """Summarize a finished reasoning item into its `summary` (sealed again if it is sealed);
        the summary's events, to come before the item's `output_item.done`."""
        text = "".join(str(part.get("text", "")) for part in item.get("content") or () if isinstance(part, Mapping))
        model = self.summary_model or str(turn.request.model)
        summary = await summarize(self.inference, model, text, style) if text.strip() else None
        if summary is None:
            return []
        item["summary"] = [{"type": "summary_text", "text": summary}]
        if translator.seal is not None:
            item["encrypted_content"] = translator.seal(item)
        return summary_events(item, output_index, summary)

    async def _events(self, turn: Turn, loop: ToolLoop) -> AsyncGenerator[Event, None]:
        """The loop's events, after the tools' preparation and, when the request asks for it and
        its context has grown past the threshold, the compaction of that context."""
        for event in turn.prepared or ():
            yield event
        for event in await self._auto_compaction(turn, loop):
            yield event
        async with contextlib.aclosing(loop.events()) as events:
            async for event in events:
                yield event

    async def _auto_compaction(self, turn: Turn, loop: ToolLoop) -> list[Event]:
        """`context_management` compaction: a `compaction` item first in the output when the
        context passes `compact_threshold` tokens; the model then reads the compacted window."""
        threshold = turn.request.compact_threshold()
        if threshold is None or turn.refusal is not None or self.seal is None:
            return []
        messages = turn.messages()
        if estimated_tokens(messages) <= threshold:
            return []
        written = await try_compaction_summary(self.inference, self.compaction_model or str(turn.request.model), messages)
        if written is None:
            return []
        summary, usage = written
        if usage is not None:
            loop.usages.append(usage)
        item = {"id": new_id("cmp"), "type": "compaction", "encrypted_content": self.seal.seal_compaction(summary)}
        output = turn.response["output"]
        output.append(item)
        index = len(output) - 1
        return [{"type": "response.output_item.added", "output_index": index, "item": {**item, "encrypted_content": ""}},
                {"type": "response.compaction.compacting", "output_index": index, "item_id": item["id"]},
                {"type": "response.output_item.done", "output_index": index, "item": item}]

    async def compact(self, request: CompactRequest) -> dict[str, Any]:
        """POST /v1/responses/compact: the context of `request` (a chain, its input, or both) as
        the user's messages and one compaction item."""
        request.check()
        if self.seal is None:
            raise InvalidRequestError("This server cannot compact: it has no key to seal compaction items with.", param="model",
                                      code="invalid_value")
        await self.inference.resolve(request.model)
        context = await self._chain(request.previous_response_id) if request.previous_response_id else Context([], [])
        input_items = await self._resolve_references(normalize_input(request.input if request.input is not None else []))
        self._check_sealed(input_items)
        items = [*context.items, *input_items]
        messages = ChatContext(renderers=self.renderers, reveal=self.seal.reveal).extend(items).messages_with(request.instructions)
        summary, usage = await compaction_summary(self.inference, self.compaction_model or str(request.model), messages)
        item = {"id": new_id("cmp"), "type": "compaction", "encrypted_content": self.seal.seal_compaction(summary)}
        return {"id": new_id("resp"), "object": "response.compaction", "created_at": int(time.time()),
                "output": [*kept_messages(items), item], "usage": usage_from_chat(usage or {"prompt_tokens": 0})}

    # --- non-streamed ----------------------------------------------------------------------

    async def run(self, turn: Turn) -> dict[str, Any]:
        """Produce the whole response, store it (one transaction), return it."""
        loop = self._loop(turn, stream=False)
        try:
            async for _ in self._events(turn, loop):
                pass
        except APIError as error:
            raise in_responses_terms(error) from None
        finally:
            if turn.tools is not None:
                await turn.tools.aclose()
        _finalize(turn.response, loop)
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
        loop = self._loop(turn, stream=True)
        finished = False
        opened = False  # an event past response.in_progress was given out
        task = asyncio.current_task() if not response["background"] else None
        if task is not None:
            self._stream_tasks.add(task)
        try:
            if turn.prepared is None and response["background"]:
                await self.open_tools(turn)
                loop.tools, turn.prepared = turn.tools, []
                async with contextlib.aclosing(loop.preparation()) as preparation:
                    async for event in preparation:
                        yield self._numbered(turn, event)
            # Closed with this stream, not left to the garbage collector: a tool call under way
            # stops when the stream does.
            async with contextlib.aclosing(self._events(turn, loop)) as events:
                async for event in events:
                    opened = True
                    yield self._numbered(turn, event)
                    if task is not None and task is not (current := asyncio.current_task()) and current is not None:
                        task = self._streamed_by(task, current)
            _finalize(response, loop)
            await self._persist_end(turn)
            finished = True
            yield self._event(turn, "response.incomplete" if response["status"] == "incomplete" else "response.completed")
        except APIError as error:
            # A stream's upstream error comes with its first chunk, past the mapping in _with_truncation.
            error = image_error(error, turn.messages()) or error
            error = in_responses_terms(error)
            if not opened and not response["background"]:
                # Refused before any output (a context too long, an image a text model cannot take,
                # a rate limit): raised as a request that is not streamed raises it. The stream's
                # consumers hold back the opening events (runtime.apis.responses.routes), so the
                # client gets the error's own status (which the SDK retries when it may), and
                # nothing is kept of a response it never saw.
                finished = True
                if leased:
                    await self.store.discard(response["id"])
                raise error
            for event in loop.close():
                yield self._numbered(turn, event)
            _finalize(response, loop, "failed", error=response_error(error))
            await self._persist_end(turn)
            finished = True
            yield self._event(turn, "response.failed")
        except Exception:
            # A fault of the server's own or of a provider (not an error in OpenAI's terms): the
            # client still gets the response's end, the response is kept as failed, not as
            # cancelled, and the log has the cause under the response's id.
            log.exception("response %s failed", response["id"])
            for event in loop.close():
                yield self._numbered(turn, event)
            _finalize(response, loop, "failed", error=SERVER_ERROR)
            await self._persist_end(turn)
            finished = True
            yield self._event(turn, "response.failed")
        except asyncio.CancelledError:
            if not self._ending_streams or task is None or finished:
                raise
            # The shutdown's grace period is over: this client gets the response's end, not a cut.
            task.uncancel()  # this task's: `_streamed_by` follows the stream from task to task
            for event in loop.close():
                yield self._numbered(turn, event)
            _finalize(response, loop, "failed", error=SHUTDOWN_ERROR)
            await self._persist_end(turn)
            finished = True
            yield self._event(turn, "response.failed")
        finally:
            if task is not None:
                self._stream_tasks.discard(task)
            if not finished:
                # The client went away, the response was cancelled, or the server is stopping:
                # keep what was produced, under a terminal status.
                loop.close()
                if self.shutting_down:
                    _finalize(response, loop, "failed", error=SHUTDOWN_ERROR)
                else:
                    _finalize(response, loop, "cancelled")
                self._detach(self._persist_end(turn))
            if turn.tools is not None:
                self._detach(turn.tools.aclose())
            if leased:
                self._streaming.discard(response["id"])

    def _streamed_by(self, task: asyncio.Task[Any], current: asyncio.Task[Any]) -> asyncio.Task[Any]:
        """`current` makes the stream's events now, not `task`: a consumer may make a stream's
        head in one task and the rest in another (runtime.sse), and shutdown must cancel the one
        that is waiting."""
        self._stream_tasks.discard(task)
        self._stream_tasks.add(current)
        return current

    def _event(self, turn: Turn, kind: str) -> Event:
        snapshot = _snapshot(turn.response)
        if kind in ("response.created", "response.in_progress"):
            snapshot["output"] = []  # items are announced by their own events (prepared ones too)
        return {"type": kind, "sequence_number": turn.sequence(), "response": snapshot}

    def _numbered(self, turn: Turn, event: Event) -> Event:
        # The translator's events are fresh dicts: numbered in place.
        event["sequence_number"] = turn.sequence()
        if event["type"] in PART_EVENTS:
            event["response_id"] = turn.response["id"]
        return event

    async def _persist_end(self, turn: Turn) -> None:
        if not turn.stored:
            return
        done: set[str] = set()
        try:
            await self._store_end(turn, done)
        except StorageUnavailableError:
            # The database is away. Whoever streams the response has had every event of it: it
            # still ends as it ended, and its stored copy is written once the database is back,
            # this process keeping its lease meanwhile (so no sweep takes it for orphaned).
            self._persisting.add(turn.response["id"])
            self._renew()
            self._detach(self._store_end_when_back(turn, done))

    async def _store_end(self, turn: Turn, done: set[str]) -> None:
        """Store the response's end, then add it to its conversation: each step once (`done`
        names those made), so that a step retried after an outage does not make another again."""
        if "finish" not in done:
            retried = "tried" in done
            done.add("tried")
            if turn.response["background"] and turn.response["status"] != "cancelled":
                # A background response may have been cancelled meanwhile: the cancel's status
                # wins, but the output produced so far is still kept. Unless a try before this one
                # landed, its answer lost with its connection (PostgreSQL): then it is what stays.
                if not await self.store.finish(turn.response, turn.response["output"], only_if_status=["in_progress"]) and not (
                        retried and (await self.store.get(turn.response["id"])).status == turn.response["status"]):
                    turn.response["status"] = "cancelled"
                    await self.store.finish(turn.response, turn.response["output"])
            else:
                await self.store.finish(turn.response, turn.response["output"])
            done.add("finish")
            self._remember(turn)
        if "conversation" not in done:
            await self._extend_conversation(turn)
            done.add("conversation")

    async def _store_end_when_back(self, turn: Turn, done: set[str]) -> None:
        response_id = turn.response["id"]
        try:
            await when_back(lambda: self._store_end(turn, done), within_s=STORE_RETRY_S)
            log.info("response %s stored once the database was back", response_id)
        except StorageUnavailableError:
            log.error("response %s could not be stored: the database stayed unavailable for %.0f s; the sweep marks it failed "
                      "once the database is back", response_id, STORE_RETRY_S)
        except Exception:
            log.exception("response %s could not be stored", response_id)
        finally:
            self._persisting.discard(response_id)

    def _lease(self, response_id: str) -> None:
        self._streaming.add(response_id)
        self._renew()

    def _renew(self) -> None:
        if self._renewer is None:
            self._renewer = asyncio.get_running_loop().create_task(self._renew_leases())

    async def _renew_leases(self) -> None:
        while True:
            await asyncio.sleep(self.lease_s / 3)
            if held := self._streaming | self._persisting:
                try:
                    await self.store.renew_leases(list(held))
                except StorageUnavailableError:
                    pass  # the storage layer has said so; the next round tries again
                except Exception:
                    log.exception("could not renew the leases of %d streamed responses", len(held))

    def _detach(self, work: Coroutine[Any, Any, Any]) -> None:
        """Run `work` outside the current (possibly cancelled) task, and keep it until it ends."""
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def end_streams(self) -> None:
        """End every response being streamed to a client now: each is stored `failed` (the server
        is shutting down) and its client gets that as the stream's last event."""
        self.shutting_down = self._ending_streams = True
        for task in list(self._stream_tasks):
            task.cancel()

    async def close(self) -> None:
        """Stop background work (each marks itself failed) and wait for pending writes."""
        self.shutting_down = True
        if self._renewer is not None:
            self._renewer.cancel()
        await self.background.stop()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=10)


CONTEXT_CACHE_SIZE = 1024
SHUTDOWN_ERROR = {"code": "server_error", "message": "The server shut down before this response finished."}
SERVER_ERROR = {"code": "server_error", "message": "The server had an error while producing this response; its log names the cause."}


# What a chat completion's parameters are called in the Responses request they were made from.
_RESPONSES_PARAMS = (("messages", "input"), ("response_format.json_schema.schema", "text.format.schema"),
                     ("response_format", "text.format"), ("max_completion_tokens", "max_output_tokens"), ("max_tokens", "max_output_tokens"))


def in_responses_terms(error: APIError) -> APIError:
    """`error` from a model call, its `param` named as the Responses request names it (a model
    server names the chat request's: `messages` for a context too long)."""
    param = error.param
    if not param:
        return error
    for chat, responses in _RESPONSES_PARAMS:
        if param == chat or param.startswith(chat + ".") or param.startswith(chat + "["):
            error.param = responses + param[len(chat):] if chat != "messages" else responses
            break
    return error


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


# What model servers that do not speak OpenAI's image codes (vLLM, Ollama, llama.cpp) say about an
# image they cannot take, read as the code OpenAI gives the same mistake. Checked in this order.
_IMAGE_MISTAKES = (
    (re.compile(r"(fail|unable|could ?n[o']t)\w*\s+(to\s+)?(fetch|download|retrieve|get)\b.*image|image.*\b(404|not found)\b", re.I),
     "failed_to_download_image"),
    (re.compile(r"image.*(too (large|big)|exceeds)|(too (large|big)|exceeds).*image", re.I), "image_too_large"),
    (re.compile(r"image.*(truncated|corrupt)|(truncated|corrupt).*image", re.I), "image_parse_error"),
    (re.compile(r"base64.*image|image.*base64", re.I), "invalid_base64_image"),
    (re.compile(r"cannot identify image|unknown (image )?format|unsupported image|invalid image|not a valid image|"
                r"(fail|unable)\w* to (load|decode|open|process) (the )?image", re.I), "invalid_image_format"),
)


def image_error(error: APIError, messages: Sequence[Mapping[str, Any]]) -> InvalidRequestError | None:
    """The 400 OpenAI answers for an image it cannot take, when the model server's error is about
    one of the request's images in its own words (whatever its status: vLLM answers a URL it cannot
    fetch with a 500); None for any other error."""
    if error.code in RESPONSE_ERROR_CODES or error.status in (429, 503, 504) or not _has_images(messages):
        return None
    for pattern, code in _IMAGE_MISTAKES:
        if pattern.search(error.message):
            return InvalidRequestError(f"The model could not use an image of the input: {error.message[:300]}", code=code)
    return None


def _has_images(messages: Sequence[Mapping[str, Any]]) -> bool:
    return any(isinstance(part, Mapping) and part.get("type") == "image_url"
               for message in messages if isinstance(message.get("content"), list) for part in message["content"])


# The `code` values of a Response's `error` (openai.types.responses.ResponseError).
RESPONSE_ERROR_CODES = frozenset({
    "server_error", "rate_limit_exceeded", "invalid_prompt", "data_residency_mismatch", "bio_policy",
    "misalignment_policy_violation", "vector_store_timeout", "invalid_image", "invalid_image_format",
    "invalid_base64_image", "invalid_image_url", "image_too_large", "image_too_small", "image_parse_error",
    "image_content_policy_violation", "invalid_image_mode", "image_file_too_large", "unsupported_image_media_type",
    "empty_image_file", "failed_to_download_image", "image_file_not_found",
})


def _upstream_json(raw: bytes) -> dict[str, Any]:
    """A chat completion or chunk from the model server; one that is not a JSON object is the
    server's fault: a 502 (or, in a stream, `response.failed`), never a 500 of ours."""
    try:
        value = fastjson.loads(raw)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise UpstreamError(f"The model server answered with malformed data, not a JSON object: {raw[:120]!r}",
                            status_code=502, code="upstream_malformed")
    return value


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


def _snapshot(response: dict[str, Any]) -> dict[str, Any]:
    return {**response, "output": list(response["output"])}
