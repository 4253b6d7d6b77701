"""Preparing a response: a create request checked, its context gathered, and a complete `Turn`
built for the engine.

Every client mistake is raised here, before anything is streamed or stored: the request's own
checks, its prompt, its tools (a type no runtime serves, an MCP server that cannot list its tools:
a 424), its guardrails, its model, its context (a previous response or conversation that is not
there), the items it references and the encrypted content it sends back. Then the input guardrail
runs, files named by id are read in, and the tools are opened and prepared, except for a
background response, which opens them when it runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from contract.files.protocol import FilesProvider
from contract.items import new_id, normalize_input
from contract.prompts.protocol import PromptsProvider
from contract.responses.models import CreateResponse, response_object
from providers.responses.context import ContextSource, check_call_outputs
from providers.responses.files import with_files_read
from providers.responses.guardrails import Guardrails
from providers.responses.items import ChatContext, Renderer
from providers.responses.loop import prepare_tools
from providers.responses.model_calls import Inference
from providers.responses.output_schema import check_output_schema
from providers.responses.prompting import expand_prompt
from providers.responses.sealing import ReasoningSeal, check_sealed
from providers.responses.tools import RequestTools, check_server_tools, needs_request_tools, open_request_tools, public_tools, served_only
from providers.responses.translate import Event
from providers.responses.turn import Context, Turn
from runtime.apis.tool_runtime.router import ToolRouter

__all__ = ["Preparation"]


class Preparation:
    """Turns create requests into turns."""

    def __init__(self, inference: Inference, contexts: ContextSource, guardrails: Guardrails, *, tools: ToolRouter | None = None,
                 files: FilesProvider | None = None, prompts: PromptsProvider | None = None, seal: ReasoningSeal | None = None,
                 omit_unserved: bool = False, parallel: int = 8) -> None:
        self.inference = inference
        self.contexts = contexts
        self.guardrails = guardrails
        self.tools = tools
        self.files = files
        self.prompts = prompts
        self.seal = seal
        self.omit_unserved = omit_unserved
        self.parallel = parallel
        self.renderers: Mapping[str, Renderer] = tools.renderers if tools is not None else {}

    async def prepare(self, request: CreateResponse) -> Turn:
        """The turn of a create request, or the client's mistake in it raised."""
        request.check()
        prompt = None
        if request.prompt is not None:
            request, prompt = await expand_prompt(request, self.prompts)
        check_output_schema(request.text)
        asked = request
        if self.omit_unserved:
            request = served_only(request, self.tools)
        await check_server_tools(request, self.tools)
        self.guardrails.applies(request, "input")  # guardrails named that this server cannot run: refused before any work
        await self.inference.resolve(request.model)
        input_items = normalize_input(request.input)
        context = await self.contexts.of(request)
        input_items = await self.contexts.resolve_references(input_items)
        check_call_outputs(context.items, input_items)
        check_sealed(self.seal, input_items)
        response = response_object(request, new_id("resp"), "queued" if request.background else "in_progress",
                                   conversation_id=request.conversation_id)
        response["tools"] = public_tools(asked, self.tools)[0]
        if prompt is not None:
            response["prompt"] = prompt
        return await self._turn(request, response, input_items, context, open_tools=not request.background)

    async def resume(self, request: CreateResponse, response: dict[str, Any], input_items: list[dict[str, Any]],
                     ancestors: list[str]) -> Turn:
        """The turn of a queued background response taken over from a process that stopped: its
        context read again (it may be gone: a NotFoundError), its guardrail run again (the refusal
        found when it was accepted is not stored), its files read in again."""
        context = await self.contexts.of(request)
        return await self._turn(request, response, input_items, Context(ancestors, context.items, context.chat), open_tools=False)

    async def _turn(self, request: CreateResponse, response: dict[str, Any], input_items: list[dict[str, Any]], context: Context, *,
                    open_tools: bool) -> Turn:
        refusal = await self.guardrails.refusal(request, input_items)
        reveal = self.seal.reveal if self.seal is not None else None
        chat, seen = await self._folded(context, input_items, reveal)
        tools, prepared = (await self._opened_tools(request, response, context.items, input_items)
                           if open_tools and needs_request_tools(request, context.items, input_items) else (None, ()))
        return Turn(request, response, input_items, context.items, context.ancestors, chat, seen, self.renderers, reveal, refusal,
                    self.guardrails.applies(request, "output"), tools, prepared)

    async def _folded(self, context: Context, input_items: list[dict[str, Any]],
                      reveal: Any) -> tuple[ChatContext, tuple[list[dict[str, Any]], list[dict[str, Any]]] | None]:
        """The context and input folded into chat messages, files named by id read in (the stored
        items keep the ids), and, when files were read, the items as the model sees them."""
        history = context.items
        base = context.chat if context.chat is not None else ChatContext(renderers=self.renderers, reveal=reveal).extend(history)
        chat = base.extend(input_items)
        if not chat.file_ids:
            return chat, None
        # A cached context was read in already.
        seen = (await with_files_read(history, self.files) if context.chat is None and history else history,
                await with_files_read(input_items, self.files))
        base = context.chat if context.chat is not None else ChatContext(renderers=self.renderers, reveal=reveal).extend(seen[0])
        return base.extend(seen[1]), seen

    async def _opened_tools(self, request: CreateResponse, response: dict[str, Any], history: list[dict[str, Any]],
                            input_items: list[dict[str, Any]]) -> tuple[RequestTools | None, tuple[Event, ...]]:
        """The request's tools opened and prepared (an MCP server's tools listed...) before the
        response starts, and the events of the items that preparation put in its output."""
        tools = await open_request_tools(request, self.tools, response["id"], history, input_items)
        if tools is None:
            return None, ()
        try:
            return tools, tuple([event async for event in prepare_tools(tools, response["output"], self.parallel)])
        except BaseException:
            await tools.aclose()
            raise
