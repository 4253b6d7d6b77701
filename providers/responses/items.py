"""Responses items as Chat Completions messages (pure functions)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from providers.responses.client_tools import CALL_TYPES, OUTPUT_TYPES, call_input, model_name, output_call_id, output_text
from contract.tool_runtime.protocol import ToolExchange

__all__ = ["SUMMARY_HEADER", "ChatContext", "Renderer", "chat_messages"]

SUMMARY_HEADER = "A summary of the conversation so far, which replaces its earlier turns:"
"""What a compaction item's summary reads under, to the model (providers/responses/compaction.py)."""

Renderer = Callable[[Mapping[str, Any]], ToolExchange | None]
Reveal = Callable[[Mapping[str, Any]], list[str]]
"""How an output item of a server-side tool reads to the model (a tool runtime's `render`)."""


# --- to chat messages ----------------------------------------------------------------------


def chat_messages(items: Iterable[Mapping[str, Any]], instructions: str | None,
                  renderers: Mapping[str, Renderer] | None = None, reveal: Reveal | None = None) -> list[dict[str, Any]]:
    """Chat Completions messages for a model context made of Responses items, in order.

    Consecutive function calls become one assistant message with several tool calls (how chat
    models emit parallel calls); reasoning items travel as `reasoning_content` on the assistant
    message they precede, which reasoning-aware servers read and others ignore. Items of
    server-side tools read as their runtime's `renderers` say (a call and its result); items
    no renderer knows are left out."""
    return ChatContext(renderers=renderers or {}, reveal=reveal).extend(items).messages_with(instructions)


@dataclass(frozen=True)
class ChatContext:
    """The chat messages folded from a sequence of items, which a longer sequence can continue
    from: the next turn of a chain converts only its own items, not the whole history again.

    Immutable: `extend` returns a new context and never changes a message of this one (a call
    merged into the last assistant message replaces that message with a copy)."""

    messages: tuple[dict[str, Any], ...] = ()
    pending_reasoning: tuple[str, ...] = ()
    renderers: Mapping[str, Renderer] = field(default_factory=dict, compare=False)
    server_calls: int = 0
    """Server-side calls rendered so far: their chat ids are numbered from it, so the same items
    always give the same messages (the items' own ids are random)."""
    deferred: tuple[tuple[str, str, str], ...] = ()
    """(key, name, arguments) of calls whose result a later item gives (an approval pending)."""
    file_ids: bool = False
    """Whether a message names a file by id (`input_file`/`input_image` with `file_id`), which
    the model cannot read as it is: the engine reads such files in and converts again."""
    reveal: Reveal | None = field(default=None, compare=False)
    """The text of a reasoning item that carries it only encrypted (providers/responses/sealing.py)."""

    def extend(self, items: Iterable[Mapping[str, Any]]) -> ChatContext:
        messages = list(self.messages)
        pending_reasoning = list(self.pending_reasoning)
        server_calls, deferred, file_ids = self.server_calls, self.deferred, self.file_ids
        for item in items:
            kind = item.get("type")
            if kind == "message":
                message = _chat_message(item)
                if not file_ids and message["content"].__class__ is list:  # only messages of several parts
                    file_ids = any(part.get("file_id") for part in item["content"])
                if pending_reasoning and message["role"] == "assistant":
                    message["reasoning_content"] = "".join(pending_reasoning)
                    pending_reasoning = []
                messages.append(message)
            elif kind == "function_call":
                if item.get("namespace"):
                    item = {**item, "name": model_name("function", str(item["name"]), str(item["namespace"]))}
                _append_tool_call(messages, item)
            elif kind in CALL_TYPES:
                name, arguments = call_input(item)
                _append_tool_call(messages, {"call_id": item.get("call_id") or item.get("id"), "name": name, "arguments": arguments})
            elif kind in OUTPUT_TYPES:
                output = output_text(item)
                if output.__class__ is str:
                    _append_tool_message(messages, {"role": "tool", "tool_call_id": output_call_id(item), "content": output})
                else:
                    text, attachments = _output_parts(output)
                    _append_tool_message(messages, {"role": "tool", "tool_call_id": output_call_id(item), "content": text}, attachments)
            elif kind == "function_call_output":
                output = item["output"]
                if output.__class__ is str:
                    _append_tool_message(messages, {"role": "tool", "tool_call_id": item["call_id"], "content": output})
                else:
                    text, attachments = _output_parts(output)
                    file_ids = file_ids or any(part.get("file_id") for part in attachments)
                    _append_tool_message(messages, {"role": "tool", "tool_call_id": item["call_id"], "content": text}, attachments)
            elif kind == "reasoning":
                pending_reasoning.extend(_reasoning_text(item, self.reveal))
            elif kind == "compaction":
                # What came before it reads as its summary, the user's own messages after it (so a
                # chat model's last message is still the user's, not the summary).
                summary = "".join(self.reveal(item)) if self.reveal is not None else ""
                messages = [message for message in messages if message["role"] in ("user", "system", "developer")]
                lead = next((i for i, message in enumerate(messages) if message["role"] == "user"), len(messages))
                messages.insert(lead, {"role": "user", "content": f"{SUMMARY_HEADER}\n\n{summary}"})
                pending_reasoning = []
            elif (render := self.renderers.get(str(kind))) is not None and (exchange := render(item)) is not None:
                server_calls, deferred = _append_exchange(messages, exchange, server_calls, deferred, pending_reasoning)
        return ChatContext(tuple(messages), tuple(pending_reasoning), self.renderers, server_calls, deferred, file_ids, self.reveal)

    def messages_with(self, instructions: str | None) -> list[dict[str, Any]]:
        """The messages to send: `instructions` (this turn's only) as the system message first."""
        if instructions:
            return [{"role": "system", "content": instructions}, *self.messages]
        return list(self.messages)


def _append_exchange(
    messages: list[dict[str, Any]], exchange: ToolExchange, server_calls: int,
    deferred: tuple[tuple[str, str, str], ...], pending_reasoning: list[str],
) -> tuple[int, tuple[tuple[str, str, str], ...]]:
    """A server-side call and its result, as an assistant tool call then its tool message."""
    if exchange.output is None:
        if exchange.name is not None:
            deferred = (*deferred, (exchange.key, exchange.name, exchange.arguments or "{}"))
        return server_calls, deferred
    name, arguments = exchange.name, exchange.arguments
    for index, (key, deferred_name, deferred_arguments) in enumerate(deferred):
        if key == exchange.key:
            name, arguments = deferred_name, deferred_arguments
            deferred = deferred[:index] + deferred[index + 1:]
            break
    if name is None:
        return server_calls, deferred  # a result whose call is not in the context
    server_calls += 1
    call_id = f"call_s{server_calls}"
    assistant: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": [
        {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments or "{}"}}]}
    if pending_reasoning:
        assistant["reasoning_content"] = "".join(pending_reasoning)
        pending_reasoning.clear()
    messages += [assistant, {"role": "tool", "tool_call_id": call_id, "content": exchange.output}]
    if exchange.attachments:
        messages.append(_attachments_message(name, exchange.attachments))
    return server_calls, deferred


def _attachments_message(name: str, parts: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    # Chat tool messages carry text only: the images and files a tool returned follow as user content.
    return {"role": "user", "content": [{"type": "text", "text": f"(Returned by {name}:)"}, *map(_chat_part, parts)]}


def _append_tool_message(messages: list[dict[str, Any]], message: dict[str, Any], attachments: Sequence[Mapping[str, Any]] = ()) -> None:
    """Put a tool message straight after its call's assistant message and the tool messages
    already there: chat models refuse a call not immediately followed by its results, and a
    client may send an output after a later user message. Its attachments follow the results."""
    call_id = message["tool_call_id"]
    index = len(messages) - 1
    while index >= 0 and not _has_call(messages[index], call_id):
        index -= 1
    if index < 0:  # a result whose call is not in the context: left where it came
        messages.append(message)
        if attachments:
            messages.append(_attachments_message(call_id, attachments))
        return
    position = index + 1
    while position < len(messages) and messages[position]["role"] == "tool":
        position += 1
    messages.insert(position, message)
    if attachments:
        name = next(call["function"]["name"] for call in messages[index]["tool_calls"] if call["id"] == call_id)
        messages.insert(position + 1, _attachments_message(name, attachments))


def _has_call(message: Mapping[str, Any], call_id: str) -> bool:
    calls = message.get("tool_calls")
    return calls is not None and message["role"] == "assistant" and any(call["id"] == call_id for call in calls)


def _chat_message(item: Mapping[str, Any]) -> dict[str, Any]:
    role = item["role"]
    parts = item["content"]
    if len(parts) == 1:  # the usual case, without the general case's passes over the parts
        part = parts[0]
        kind = part["type"]
        if role == "assistant" and kind == "output_text":
            return {"role": "assistant", "content": part.get("text", "") or None}
        if role != "assistant" and kind == "input_text":
            return {"role": role, "content": part["text"]}
    if role == "assistant":
        text = "".join(part.get("text", "") for part in parts if part["type"] == "output_text")
        refusal = "".join(part.get("refusal", "") for part in parts if part["type"] == "refusal")
        message: dict[str, Any] = {"role": "assistant", "content": text or None}
        if refusal:
            message["refusal"] = refusal
        return message
    if all(part["type"] == "input_text" for part in parts):
        return {"role": role, "content": "".join(part["text"] for part in parts)}
    return {"role": role, "content": [_chat_part(part) for part in parts]}


def _chat_part(part: Mapping[str, Any]) -> dict[str, Any]:
    kind = part["type"]
    if kind == "input_image":
        image: dict[str, Any] = {"url": part.get("image_url") or part.get("file_id")}
        if part.get("detail"):
            image["detail"] = part["detail"]
        return {"type": "image_url", "image_url": image}
    if kind == "input_file":
        file = {key: part[key] for key in ("file_id", "file_data", "filename") if part.get(key)}
        if part.get("file_url") and "file_data" not in file:
            file["file_data"] = part["file_url"]
        return {"type": "file", "file": file}
    return {"type": "text", "text": part.get("text", "")}


def _append_tool_call(messages: list[dict[str, Any]], item: Mapping[str, Any]) -> None:
    arguments = item["arguments"] if isinstance(item["arguments"], str) else json.dumps(item["arguments"])
    call = {"id": item["call_id"], "type": "function", "function": {"name": item["name"], "arguments": arguments}}
    last = messages[-1] if messages else None
    # The last message may be shared with an earlier ChatContext: merged into a copy.
    if last is not None and last["role"] == "assistant" and "tool_calls" in last:
        messages[-1] = {**last, "tool_calls": [*last["tool_calls"], call]}
    elif last is not None and last["role"] == "assistant" and last.get("content") is not None:
        messages[-1] = {**last, "tool_calls": [call]}
    else:
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})


def _output_parts(output: Any) -> tuple[str, list[Mapping[str, Any]]]:
    """A function output's text, and its image and file parts (OpenAI allows all three)."""
    if not isinstance(output, list):
        return json.dumps(output), []
    parts = [part for part in output if isinstance(part, Mapping)]
    text = "".join(part.get("text", "") for part in parts if part.get("type") in ("input_text", "output_text", "text"))
    attachments = [part for part in parts if part.get("type") in ("input_image", "input_file")]
    return (text or ("(see the content that follows)" if attachments else "")), attachments


def _reasoning_text(item: Mapping[str, Any], reveal: Reveal | None = None) -> list[str]:
    parts = item.get("content") or item.get("summary") or []
    if not parts and item.get("encrypted_content") and reveal is not None:
        return reveal(item)
    return [part.get("text", "") for part in parts if isinstance(part, Mapping)]
