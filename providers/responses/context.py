"""What a response continues from: the chain of its `previous_response_id`, or its conversation,
and the items its input names by reference.

A finished stored response's context is kept in memory (`remember`), so that the next turn of its
chain reads nothing from the store; other processes, and evicted entries, read it there.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, Protocol

from contract.errors import InvalidRequestError, NotFoundError
from contract.responses.models import CreateResponse
from providers.responses.store import ResponseStore
from providers.responses.turn import Context, Turn

__all__ = ["CONTEXT_CACHE_SIZE", "ContextSource", "Conversations", "check_call_outputs"]

CONTEXT_CACHE_SIZE = 1024


class Conversations(Protocol):
    """What responses need of the conversations API."""

    async def conversation_items(self, conversation_id: str) -> list[dict[str, Any]]: ...

    async def append_items(self, conversation_id: str, items: Sequence[dict[str, Any]]) -> None: ...


class ContextSource:
    """The contexts of responses: read by preparation, kept by persistence once a turn is stored."""

    def __init__(self, store: ResponseStore, conversations: Conversations | None) -> None:
        self.store = store
        self.conversations = conversations
        self._cached: OrderedDict[str, Context] = OrderedDict()

    async def of(self, request: CreateResponse) -> Context:
        """The context `request` continues: its chain, its conversation, or nothing."""
        if request.previous_response_id:
            return await self.chain(request.previous_response_id)
        if request.conversation_id:
            return Context([], await self.conversation(request.conversation_id))
        return Context([], [])

    async def chain(self, previous_id: str) -> Context:
        """The ancestors a response continuing `previous_id` has, and its context items."""
        cached = self._cached.get(previous_id)
        # Trusted only while the response is there for this caller: another replica may have
        # deleted it, and a caller the access policy lets read it may chain from it too.
        if cached is not None and await self.store.readable(previous_id):
            self._cached.move_to_end(previous_id)
            return cached
        try:
            previous, history = await self.store.context(previous_id)
        except NotFoundError:
            # A 400, as OpenAI answers it (not a 404: the request is what is wrong, not its URL).
            raise InvalidRequestError(
                f"Previous response with id '{previous_id}' not found. Only stored responses (store=true) can be continued.",
                param="previous_response_id", code="previous_response_not_found",
            ) from None
        return Context([*previous.ancestors, previous.id], history)

    async def conversation(self, conversation_id: str) -> list[dict[str, Any]]:
        if self.conversations is None:
            raise InvalidRequestError(
                "'conversation' needs the conversations API: add a conversations provider to this stack.", param="conversation", code="invalid_value"
            )
        try:
            return await self.conversations.conversation_items(conversation_id)
        except NotFoundError as error:
            raise NotFoundError(error.message, param="conversation", code="conversation_not_found") from None

    async def resolve_references(self, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """`items` with each `item_reference` replaced by the stored item it names."""
        wanted = [item["id"] for item in items if item["type"] == "item_reference"]
        if not wanted:
            return items
        found = await self.store.items_by_id(wanted)
        missing = [item_id for item_id in wanted if item_id not in found]
        if missing:
            raise NotFoundError(f"Item with id '{missing[0]}' not found.", param="input", code="item_not_found")
        return [found[item["id"]] if item["type"] == "item_reference" else item for item in items]

    def remember(self, turn: Turn) -> None:
        """Keep a finished stored response's context, for the next turn of its chain."""
        if not turn.stored or turn.response["status"] not in ("completed", "incomplete"):
            return
        response_id = turn.response["id"]
        output = turn.response["output"]
        self._cached[response_id] = Context([*turn.ancestors, response_id], [*turn.history, *turn.input_items, *output], turn.chat.extend(output))
        while len(self._cached) > CONTEXT_CACHE_SIZE:
            self._cached.popitem(last=False)

    def forget(self, response_id: str) -> None:
        self._cached.pop(response_id, None)

    async def extend_conversation(self, turn: Turn) -> None:
        """A finished turn (completed, or cut by max_output_tokens) appends its input and output to
        its conversation; a failed or cancelled one appends nothing, so retrying it is clean."""
        conversation_id = turn.request.conversation_id
        if self.conversations is None or not conversation_id or not turn.stored:
            return
        if turn.response["status"] in ("completed", "incomplete"):
            await self.conversations.append_items(conversation_id, [*turn.input_items, *turn.response["output"]])


# The output items that answer a call the model made earlier in the context, and that call's type.
_ANSWERS = {"function_call_output": ("function_call", "function call"), "custom_tool_call_output": ("custom_tool_call", "custom tool call")}


def check_call_outputs(history: Sequence[dict[str, Any]], input_items: Sequence[dict[str, Any]]) -> None:
    """A 400 for a tool output in `input_items` whose `call_id` names no call before it in the
    context (the chain or conversation, then the input), as OpenAI refuses it: a model shown an
    answer to a call it never made is answering a question nobody asked. After a compaction item
    the calls are out of sight, so outputs that follow one are taken as they are."""
    if not any(item.get("type") in _ANSWERS for item in input_items):
        return
    made: set[tuple[str, str]] = set()
    compacted = False
    for item in itertools.chain(history, input_items):
        kind, call_id = item.get("type"), item.get("call_id")
        if kind == "compaction":
            compacted = True
        elif kind in ("function_call", "custom_tool_call") and isinstance(call_id, str):  # (an id of another shape names no call)
            made.add((kind, call_id))
        elif kind in _ANSWERS and not compacted:
            call_type, words = _ANSWERS[kind]
            if not isinstance(call_id, str) or (call_type, call_id) not in made:
                raise InvalidRequestError(f"No tool call found for {words} output with call_id {str(item.get('call_id'))[:100]}.",
                                          param="input")
