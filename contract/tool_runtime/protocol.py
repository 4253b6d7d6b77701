"""The contract of the tool_runtime API: server-side tools of the Responses API.

Each tool type (`mcp`, `file_search`, `web_search`, a third party's own) is a provider of this
API, published by an entry point in the group `stack.providers.tool_runtime`. The responses
engine runs the tool loop and knows nothing about any type: it asks the runtime that serves a
`tools[].type` to check that tool, to open a `ToolSession` over a request's tools of its types,
and to say how each of its output items reads to the model (`render`).

Per response, the loop drives each session in this order:

1. `preparations()`: steps before the first model call (e.g. list an MCP server's tools, unless
   the context already lists them), run concurrently; their items come first in the output, in
   the steps' order. An error the tools cannot be used with at all is an `APIError` (a 4xx
   naming the tool), raised before anything is streamed or stored.
2. `pending_calls()`: calls released by this turn's input (an approved MCP call), run before
   the model is asked anything.
3. Each model turn: `functions()` are offered to the model; a call of one of them is either
   held for approval (`approval_item`, which ends the response like a client-side call) or run
   (`run`), concurrently with the turn's other server-side calls.

A tool never fails the whole response for a failed call: it records the failure on its item
(`status: "failed"`, an `error`) and `render` gives the model that error as the call's output.

Items are plain dicts in the OpenAI shapes; events are dicts of the `ResponseStreamEvent` union
without `sequence_number`, which the engine adds. The loop emits `response.output_item.added`
when a tool opens an item and `response.output_item.done` when the step that opened it returns;
a tool emits the events in between (`response.mcp_call.in_progress` and the like).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "Citations",
    "FunctionSpec",
    "ItemSink",
    "ModelCall",
    "OutputItem",
    "PublicTool",
    "Step",
    "ToolContext",
    "ToolExchange",
    "ToolRuntime",
    "ToolSession",
]


@dataclass(frozen=True)
class FunctionSpec:
    """A function a session offers the model (a Chat Completions function tool)."""

    name: str
    """Unique within its session; the loop renames it for the model if another tool has it."""
    parameters: Mapping[str, Any]
    description: str | None = None
    group: str | None = None
    """What the function belongs to (an MCP server's label): the prefix used when its name must
    be told apart from another tool's, and what a `tool_choice` of the tool's type names."""
    key: str | None = None
    """What calls of it carry as `ModelCall.name` (default: `name`), when the session needs more
    than the name to know the function (two MCP servers may list one name)."""


@dataclass(frozen=True)
class ModelCall:
    """A call of one of a session's functions."""

    name: str
    """The function's key (`FunctionSpec.key`, or its name) as the session offered it."""
    arguments: str
    """A JSON string, as the model wrote it (it may be malformed: the tool reports that)."""
    call_id: str
    """The model's id for the call."""
    approval_request_id: str | None = None
    """Set when the call was released by an approval (MCP's `mcp_approval_response`)."""


@dataclass(frozen=True)
class ToolExchange:
    """How one output item of a tool reads to the model: a call and its result.

    `key` ties a call to a result given by a later item (an MCP approval request, answered by an
    approval response or by the call it released); a result whose call was never seen is
    rendered with its own `name` and `arguments`, or dropped when it has none."""

    key: str
    name: str | None = None
    arguments: str | None = None
    output: str | None = None
    """The result as text; None: the call waits for its result (an approval pending)."""
    attachments: tuple[Mapping[str, Any], ...] = ()
    """Input content parts (`input_image`, `input_file`) the model gets beside `output`."""


@dataclass(frozen=True)
class ToolContext:
    """What a session may read of the response it serves."""

    response_id: str
    history: Sequence[Mapping[str, Any]]
    """The items before this turn (the previous_response_id chain or the conversation)."""
    input: Sequence[Mapping[str, Any]]
    """This turn's input items."""


@dataclass(frozen=True)
class PublicTool:
    """A `tools[]` entry as it may be stored and echoed: without secrets."""

    tool: dict[str, Any]
    secrets_removed: bool = False
    """True when the request's entry carried secrets (a token, header values) that were left out:
    a response stored this way cannot be resumed by another process, which lacks them."""


class OutputItem(Protocol):
    """An item a tool is producing. The tool changes `item` in place as it goes (its final
    state is what `response.output_item.done` carries and what is stored)."""

    item: dict[str, Any]
    output_index: int

    def emit(self, event_type: str, **fields: Any) -> None:
        """Emit an event about this item; `item_id` and `output_index` are added."""


class ItemSink(Protocol):
    def open(self, item: dict[str, Any]) -> OutputItem:
        """Place a new item at the end of the output (emits `response.output_item.added`)."""


class Citations(Protocol):
    """Reads the model's answer as it streams and turns the source markers it writes into
    annotations of the text (see contract.tool_runtime.citations for the usual one).

    Each call returns the text to send on (markers taken out; some may be held back until it is
    known whether they begin a marker) and the annotations that text ends at, each with its
    `index` into the whole answer."""

    def feed(self, text: str) -> tuple[str, list[dict[str, Any]]]: ...

    def finish(self) -> tuple[str, list[dict[str, Any]]]:
        """The text still held back, and the last annotations."""


Step = Callable[[ItemSink], Awaitable[None]]
"""Work that produces output items into the sink it is given."""


class ToolSession(Protocol):
    """One request's tools of one runtime."""

    def preparations(self) -> Sequence[Step]: ...

    def functions(self) -> Sequence[FunctionSpec]: ...

    def pending_calls(self) -> Sequence[ModelCall]: ...

    def approval_item(self, call: ModelCall) -> dict[str, Any] | None:
        """The approval request item to return instead of running `call`, or None to run it."""

    async def run(self, call: ModelCall, sink: ItemSink) -> None:
        """Run `call`, producing its item in `sink`; failures go on the item, not raised."""

    def citations(self) -> Citations | None:
        """For the next part of the answer: what ties it to the sources this session's calls
        returned so far; None when they returned none (or the tool has none to cite)."""

    async def aclose(self) -> None: ...


@runtime_checkable
class ToolRuntime(Protocol):
    """What a tool_runtime provider implements."""

    @property
    def tool_types(self) -> frozenset[str]:
        """The `tools[].type` values it serves (e.g. `mcp`)."""

    @property
    def item_types(self) -> frozenset[str]:
        """The output item types it produces, which `render` turns into model context."""

    async def check_tool(self, tool: Mapping[str, Any], param: str) -> None:
        """Raise `InvalidRequestError` (naming `param`, e.g. `tools[2].server_url`) for a bad entry."""

    def public_tool(self, tool: Mapping[str, Any]) -> PublicTool:
        """The entry as a stored response and its echo may show it."""

    def render(self, item: Mapping[str, Any]) -> ToolExchange | None:
        """How `item` (of one of `item_types`) reads to the model; None: it does not. A pure
        function of the item, so a chain replayed from the store gives the model the context
        it had live."""

    async def open_session(self, tools: Sequence[Mapping[str, Any]], context: ToolContext) -> ToolSession:
        """A session over this request's tools of this runtime's types (checked already)."""

