"""The `file_search` tool: the model searches the request's vector stores, and cites what it uses.

The model is offered one function per `file_search` tool, taking a list of queries. Its call
becomes a `file_search_call` item (`in_progress`, `searching`, `completed`), whose `results` are
the chunks found; the model reads them numbered, and the answer's citations of those numbers
become `file_citation` annotations (contract.tool_runtime.citations).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from contract.spec import Api, EmptyConfig, ProviderContext, ProviderSpec
from contract.items import new_id
from contract.tool_runtime.citations import MarkerCitations, Source, numbered_sources
from contract.tool_runtime.protocol import FunctionSpec, ItemSink, ModelCall, PublicTool, Step, ToolContext, ToolExchange
from contract.vector_stores.models import Search, check_filter, parse_max_results, parse_ranking
from contract.vector_stores.protocol import VectorStoresProvider
from contract.errors import InvalidRequestError, NotFoundError

__all__ = ["FILE_SEARCH", "FileSearchRuntime", "FileSearchSession"]

MAX_QUERIES = 5
_FIELDS = frozenset({"type", "vector_store_ids", "filters", "max_num_results", "ranking_options"})
_PARAMETERS = {
    "type": "object",
    "properties": {"queries": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": MAX_QUERIES,
                               "description": "Search queries: the question in the user's words, and rephrasings of it."}},
    "required": ["queries"],
}
_DESCRIPTION = ("Search the user's uploaded files for passages relevant to the queries. Use it for any question the files may "
                "answer; cite the passages you use by their number.")


class FileSearchRuntime:
    """Implements contract.tool_runtime.protocol.ToolRuntime for `file_search` tools."""

    tool_types = frozenset({"file_search"})
    item_types = frozenset({"file_search_call"})

    def __init__(self, stores: VectorStoresProvider) -> None:
        self.stores = stores

    async def check_tool(self, tool: Mapping[str, Any], param: str) -> None:
        for key in tool:
            if key not in _FIELDS:
                raise InvalidRequestError(f"Unknown parameter: '{param}.{key}'.", param=f"{param}.{key}", code="unknown_parameter")
        ids = tool.get("vector_store_ids")
        if not isinstance(ids, list) or not ids or not all(isinstance(item, str) and item for item in ids):
            raise InvalidRequestError(f"Invalid '{param}.vector_store_ids': expected a non-empty array of vector store ids.",
                                      param=f"{param}.vector_store_ids", code="invalid_value" if ids is not None else "missing_required_parameter")
        check_filter(tool.get("filters"), f"{param}.filters")
        parse_max_results(tool.get("max_num_results"), f"{param}.max_num_results")
        parse_ranking(tool.get("ranking_options"), f"{param}.ranking_options")
        for number, store_id in enumerate(ids):
            try:
                await self.stores.get_store(store_id)
            except NotFoundError:
                raise InvalidRequestError(f"Invalid '{param}.vector_store_ids[{number}]': no vector store found with id '{store_id[:80]}'.",
                                          param=f"{param}.vector_store_ids", code="invalid_value") from None

    def public_tool(self, tool: Mapping[str, Any]) -> PublicTool:
        public = {"type": "file_search", "vector_store_ids": list(tool["vector_store_ids"]), "filters": tool.get("filters"),
                  "max_num_results": tool.get("max_num_results", 10),
                  "ranking_options": tool.get("ranking_options") or {"ranker": "auto", "score_threshold": 0.0}}
        return PublicTool(public)

    def render(self, item: Mapping[str, Any]) -> ToolExchange | None:
        # A client's replayed item may carry anything in its fields: what is not of its shape is not read.
        queries = item.get("queries")
        arguments = json.dumps({"queries": [query for query in queries if isinstance(query, str)] if isinstance(queries, list) else []})
        if item.get("status") != "completed":
            return ToolExchange(str(item.get("id")), "file_search", arguments, "The search failed; no results.")
        results = item.get("results")
        if not isinstance(results, list):
            return ToolExchange(str(item.get("id")), "file_search", arguments, "(The results of this search were not kept.)")
        return ToolExchange(str(item.get("id")), "file_search", arguments,
                            numbered_sources(_sources([result for result in results if isinstance(result, Mapping)]), _render_source))

    async def open_session(self, tools: Sequence[Mapping[str, Any]], context: ToolContext) -> FileSearchSession:
        return FileSearchSession(self.stores, list(tools))


class FileSearchSession:
    """Implements contract.tool_runtime.protocol.ToolSession for a request's file_search tools."""

    def __init__(self, stores: VectorStoresProvider, tools: list[Mapping[str, Any]]) -> None:
        self.stores = stores
        self.tools = tools
        self._latest: list[Source] = []

    def preparations(self) -> Sequence[Step]:
        return ()

    def functions(self) -> Sequence[FunctionSpec]:
        return [FunctionSpec("file_search", _PARAMETERS, _DESCRIPTION, group="file_search", key=str(index))
                for index in range(len(self.tools))]

    def pending_calls(self) -> Sequence[ModelCall]:
        return ()

    def approval_item(self, call: ModelCall) -> dict[str, Any] | None:
        return None

    async def run(self, call: ModelCall, sink: ItemSink) -> None:
        tool = self.tools[int(call.name)]
        queries = _queries(call.arguments)
        item = sink.open({"id": new_id("fs"), "type": "file_search_call", "status": "in_progress", "queries": queries, "results": None})
        item.emit("response.file_search_call.in_progress")
        if not queries:
            item.item["status"] = "failed"
            return
        item.item["status"] = "searching"
        item.emit("response.file_search_call.searching")
        search = Search(tuple(queries), tool.get("filters"), parse_max_results(tool.get("max_num_results")),
                        parse_ranking(tool.get("ranking_options")))
        try:
            hits = await self.stores.search(tool["vector_store_ids"], search)
        except (NotFoundError, InvalidRequestError):  # a store deleted or expired since the request was checked
            item.item["status"] = "failed"
            return
        results = [{"file_id": hit.file_id, "filename": hit.filename, "score": hit.score, "text": hit.text,
                    "attributes": dict(hit.attributes)} for hit in hits]
        item.item.update(status="completed", results=results)
        self._latest = _sources(results)
        item.emit("response.file_search_call.completed")

    def citations(self) -> MarkerCitations | None:
        """The answer cites the latest search's results, by the numbers the model read them under."""
        return MarkerCitations(self._latest) if self._latest else None

    async def aclose(self) -> None:
        return None


def _queries(arguments: str) -> list[str]:
    try:
        parsed = json.loads(arguments or "{}")
    except ValueError:
        return []
    if not isinstance(parsed, dict):
        return []
    raw = parsed.get("queries", parsed.get("query"))
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, list):
        return []
    return [query.strip() for query in raw if isinstance(query, str) and query.strip()][:MAX_QUERIES]


def _sources(results: Sequence[Mapping[str, Any]]) -> list[Source]:
    return [Source({"type": "file_citation", "file_id": result.get("file_id"), "filename": result.get("filename")},
                   str(result.get("text") or "")) for result in results]


def _render_source(number: int, source: Source) -> str:
    return f"[{number}] {source.annotation.get('filename')}\n{source.text}"


@contextlib.asynccontextmanager
async def create(context: ProviderContext[EmptyConfig]) -> AsyncIterator[FileSearchRuntime]:
    yield FileSearchRuntime(context.deps[Api.vector_stores])


FILE_SEARCH = ProviderSpec(
    api=Api.tool_runtime,
    name="file_search",
    config_model=EmptyConfig,
    factory=create,
    requires=(Api.vector_stores,),
    description="The file_search tool: searches the request's vector stores and cites the passages the answer uses",
)
