"""A Responses `Response` (of a Messages request with server tools, `server_tools.py`) as an
Anthropic Message, and the blocks the stream's translation (`response_stream.py`) shares with it.
Pure: no I/O.

    reasoning                      a `thinking` block, signed by `sign`
    mcp_list_tools                 nothing (Anthropic's connector lists a server's tools unseen)
    mcp_call                       `mcp_tool_use` (id `mcptoolu_` and the item's, name, server_name, input) and
                                   `mcp_tool_result` (is_error, content: one text block: the output, or the error)
    web_search_call (search)       `server_tool_use` (id `srvtoolu_` and the item's, name web_search, input {query})
                                   and `web_search_tool_result` (content: a `web_search_result` per page: url,
                                   title, `encrypted_content` (the page as the model read it, sealed by
                                   `seal_result`), page_age null; a failed search: the error `unavailable`)
    web_search_call (open_page,    nothing: this server's web search also reads pages, which Anthropic's tool
    find_in_page)                  does not; what was read stays the model's, as in Responses
    message                        `text` blocks, split at the `url_citation` annotations' spans as Anthropic
                                   splits them: a block per cited span, its `citations` as
                                   `web_search_result_location` (url, title, cited_text: the sentence of the
                                   page the model read that shares most words with the span, encrypted_index);
                                   a refusal's text as a text block
    function_call                  `tool_use` (the call id as a `toolu_` id, the arguments parsed)
    status, incomplete_details     stop_reason: tool_use when a function is called, refusal, end_turn;
                                   max_output_tokens: max_tokens; max_messages (the tool loop's turns spent):
                                   pause_turn, which Anthropic's clients answer by sending the turn back
    usage                          input (less the cached) and output tokens; server_tool_use.web_search_requests
                                   when the request had the web search tool
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from providers.messages.response import REFUSAL_DETAILS, message_usage, new_message_id, thinking_block, tool_input, tool_use_id

__all__ = ["ResultSeal", "citation", "item_blocks", "item_pages", "message_from_response", "search_sources", "stop_reason", "suffix",
           "text_blocks", "usage"]

ResultSeal = Callable[[Mapping[str, Any]], str]
"""Seals a search result (url, title, text) into its opaque `encrypted_content`."""

_SENTENCES = re.compile(r"(?<=[.!?])\s+|\n+")
_WORDS = re.compile(r"\w{3,}")
MAX_CITED = 150  # Anthropic's cited_text is at most 150 characters


def suffix(item_id: Any, prefix: str) -> str:
    """An item id without its Responses prefix (`mcp_`, `ws_`), for the block ids built on it."""
    text = str(item_id or "")
    return text.removeprefix(f"{prefix}_") or text


def search_sources(item: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The pages a web_search_call found (`action.sources`), those with a URL."""
    action = item.get("action")
    sources = action.get("sources") if isinstance(action, Mapping) else None
    return [source for source in sources or () if isinstance(source, Mapping) and source.get("url")]


def item_pages(item: Mapping[str, Any]) -> dict[str, str]:
    """What the model read of each page a web_search_call found or opened, by URL (where citations quote from)."""
    action = item.get("action")
    if item.get("type") != "web_search_call" or not isinstance(action, Mapping):
        return {}
    if action.get("type") in ("open_page", "find_in_page"):
        return {str(action["url"]): str(action.get("text") or "")} if action.get("url") else {}
    return {str(source["url"]): str(source.get("text") or "") for source in search_sources(item)}


def _is_search(item: Mapping[str, Any]) -> bool:
    action = item.get("action")
    return item.get("type") == "web_search_call" and (not isinstance(action, Mapping) or action.get("type", "search") == "search")


def item_blocks(item: Mapping[str, Any], seal_result: ResultSeal) -> list[dict[str, Any]]:
    """The blocks of a server tool's item: its use and its result (none for items Anthropic has no block for)."""
    if item.get("type") == "mcp_call":
        return _mcp_blocks(item)
    if _is_search(item):
        return _search_blocks(item, seal_result)
    return []


def _mcp_blocks(item: Mapping[str, Any]) -> list[dict[str, Any]]:
    use_id = f"mcptoolu_{suffix(item.get('id'), 'mcp')}"
    failed = item.get("status") == "failed" or item.get("error") is not None
    text = _error_text(item.get("error")) if failed else str(item.get("output") or "")
    return [{"type": "mcp_tool_use", "id": use_id, "name": str(item.get("name") or ""), "server_name": str(item.get("server_label") or ""),
             "input": tool_input(item.get("arguments"))},
            {"type": "mcp_tool_result", "tool_use_id": use_id, "is_error": failed, "content": [{"type": "text", "text": text}]}]


def _error_text(error: Any) -> str:
    """An `mcp_call.error` as the text of the result: the tool's own words when it gave any."""
    if isinstance(error, str) and error:
        return error
    if not isinstance(error, Mapping):
        return "The tool call failed."
    texts = [str(part.get("text")) for part in error.get("content") or () if isinstance(part, Mapping) and part.get("text")]
    return "\n".join(texts) or str(error.get("message") or "The tool call failed.")


def _search_blocks(item: Mapping[str, Any], seal_result: ResultSeal) -> list[dict[str, Any]]:
    use_id = f"srvtoolu_{suffix(item.get('id'), 'ws')}"
    found = item.get("action")
    action: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    use = {"type": "server_tool_use", "id": use_id, "name": "web_search", "input": {"query": str(action.get("query") or "")}}
    content: Any
    if item.get("status") == "completed":
        content = [{"type": "web_search_result", "url": str(source["url"]), "title": str(source.get("title") or source["url"]),
                    "encrypted_content": seal_result({"url": str(source["url"]), "title": str(source.get("title") or ""),
                                                      "text": str(source.get("text") or "")}),
                    "page_age": None} for source in search_sources(item)]
    else:
        content = {"type": "web_search_tool_result_error", "error_code": "unavailable"}
    return [use, {"type": "web_search_tool_result", "tool_use_id": use_id, "content": content}]


def citation(annotation: Mapping[str, Any], text: str, pages: Mapping[str, str]) -> dict[str, Any]:
    """A `url_citation` annotation of `text` as a `web_search_result_location`; `pages` holds the
    text the model read of each URL, where `cited_text` is taken from."""
    url = str(annotation.get("url") or "")
    start, end = int(annotation.get("start_index") or 0), int(annotation.get("end_index") or 0)
    span = text[start:end]
    index = base64.urlsafe_b64encode(json.dumps([url, start, end]).encode()).decode()
    return {"type": "web_search_result_location", "url": url, "title": annotation.get("title"),
            "encrypted_index": index, "cited_text": _cited_text(span, pages.get(url) or span)}


def _cited_text(span: str, page: str) -> str:
    """The sentence of `page` sharing most words with `span` (Anthropic quotes the source), cut to 150 characters."""
    wanted = {word.lower() for word in _WORDS.findall(span)}
    sentences = [sentence.strip() for sentence in _SENTENCES.split(page) if sentence.strip()] or [page]
    best = max(sentences, key=lambda sentence: len(wanted & {word.lower() for word in _WORDS.findall(sentence)}))
    return best[:MAX_CITED]


def text_blocks(text: str, annotations: Iterable[Any], pages: Mapping[str, str]) -> list[dict[str, Any]]:
    """An output_text part as text blocks: a block per span its url_citations cover (the citations
    of every annotation over it), and the text between them as blocks of their own."""
    cited = [(int(a.get("start_index") or 0), int(a.get("end_index") or 0), a) for a in annotations
             if isinstance(a, Mapping) and a.get("type") == "url_citation"]
    cited = [(max(0, start), min(end, len(text)), a) for start, end, a in cited if start < end]
    cuts = sorted({0, len(text), *(start for start, _, _ in cited), *(end for _, end, _ in cited)})
    blocks: list[dict[str, Any]] = []
    previous: list[Any] | None = None
    for start, end in zip(cuts, cuts[1:]):
        covering = [a for low, high, a in cited if low <= start and end <= high]
        if blocks and covering == previous:
            blocks[-1]["text"] += text[start:end]
            continue
        block: dict[str, Any] = {"type": "text", "text": text[start:end]}
        if covering:
            block["citations"] = [citation(a, text, pages) for a in covering]
        blocks.append(block)
        previous = covering
    return blocks


def _message_blocks(item: Mapping[str, Any], pages: Mapping[str, str]) -> tuple[list[dict[str, Any]], bool]:
    """A message item's text blocks, and whether it holds a refusal."""
    blocks: list[dict[str, Any]] = []
    refused = False
    for part in item.get("content") or ():
        if not isinstance(part, Mapping):
            continue
        if part.get("type") == "output_text" and part.get("text"):
            blocks += text_blocks(str(part["text"]), part.get("annotations") or (), pages)
        elif part.get("type") == "refusal" and part.get("refusal"):
            blocks.append({"type": "text", "text": str(part["refusal"])})
            refused = True
    return blocks, refused


def _reasoning_text(item: Mapping[str, Any]) -> str:
    parts = item.get("content") or item.get("summary") or ()
    return "".join(str(part.get("text") or "") for part in parts if isinstance(part, Mapping))


def stop_reason(status: Any, incomplete: Any, *, tool_use: bool, refused: bool) -> str:
    """Anthropic's stop_reason for a response's status (and its incomplete_details.reason)."""
    if status == "incomplete":
        reason = incomplete.get("reason") if isinstance(incomplete, Mapping) else None
        return {"max_messages": "pause_turn", "content_filter": "refusal"}.get(str(reason), "max_tokens")
    return "tool_use" if tool_use else "refusal" if refused else "end_turn"


def usage(response_usage: Any, searches: int | None) -> dict[str, Any]:
    """A Message's usage for a Responses usage; `searches`: the web searches made (None: no web search tool)."""
    found = response_usage if isinstance(response_usage, Mapping) else {}
    chat = {"prompt_tokens": found.get("input_tokens"), "completion_tokens": found.get("output_tokens"),
            "prompt_tokens_details": found.get("input_tokens_details"),
            "completion_tokens_details": found.get("output_tokens_details")}
    counts = message_usage(chat)
    if searches is not None:
        counts["server_tool_use"] = {"web_search_requests": searches, "web_fetch_requests": 0}
    return counts


def message_from_response(response: Mapping[str, Any], model: str, *, web_search: bool, sign: Callable[[str], str] | None = None,
                          seal_result: ResultSeal) -> dict[str, Any]:
    """The Anthropic Message for a Response (a dict, as the responses provider returns it)."""
    content: list[dict[str, Any]] = []
    pages: dict[str, str] = {}
    searches, tool_use, refused = 0, False, False
    for item in response.get("output") or ():
        kind = item.get("type")
        if kind == "reasoning" and (thinking := _reasoning_text(item)):
            content.append(thinking_block(thinking, sign))
        elif kind == "message":
            blocks, refusal = _message_blocks(item, pages)
            content += blocks
            refused = refused or refusal
        elif kind == "function_call":
            content.append({"type": "tool_use", "id": tool_use_id(item.get("call_id")), "name": str(item.get("name") or ""),
                            "input": tool_input(item.get("arguments"))})
            tool_use = True
        else:
            searches += _is_search(item)
            pages.update(item_pages(item))
            content += item_blocks(item, seal_result)
    reason = stop_reason(response.get("status"), response.get("incomplete_details"), tool_use=tool_use, refused=refused)
    return {"id": new_message_id(), "type": "message", "role": "assistant", "model": model, "content": content,
            "stop_reason": reason, "stop_sequence": None, "stop_details": dict(REFUSAL_DETAILS) if reason == "refusal" else None,
            "usage": usage(response.get("usage"), searches if web_search else None)}
