"""Tool calls for a local model that has no tool format of its own: the tools are described in a
system message, and a grammar makes what the model writes a well-formed call whose arguments
validate against the tool's schema (or, with `tool_choice: auto`, either such a call or text).

A small model chooses tools poorly; the grammar makes sure that whatever it chooses has the
right shape, so the tool loops above it run.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from providers.inference.local.json_grammar import schema_grammar

__all__ = ["CLOSE", "OPEN", "MarkupFilter", "grammar", "parse_call", "tool_message", "tools_prompt", "unfinished_call", "without_markup"]

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_ROOT = re.compile(r"^root\s*::=", re.MULTILINE)
_MARKUP = re.compile(re.escape(OPEN) + r".*?(?:" + re.escape(CLOSE) + r"|$)", re.DOTALL)


def _functions(tools: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [tool["function"] for tool in tools if tool.get("type") == "function" and isinstance(tool.get("function"), Mapping)]


def tools_prompt(tools: Sequence[Mapping[str, Any]]) -> str:
    """The system message that tells the model its tools and how to call one."""
    lines = [f"You can call tools. To call one, answer with only {OPEN}{{\"name\": <the tool's name>, \"arguments\": "
             f"<its arguments as a JSON object>}}{CLOSE}. The tools:"]
    for function in _functions(tools):
        description = f": {function['description']}" if function.get("description") else ""
        lines.append(f"- {function['name']}{description}. Arguments: {json.dumps(function.get('parameters') or {'type': 'object'})}")
    return "\n".join(lines)


def _call_schema(tools: Sequence[Mapping[str, Any]], only: str | None) -> dict[str, Any]:
    variants = [
        {"type": "object", "properties": {"name": {"const": function["name"]},
                                          "arguments": function.get("parameters") or {"type": "object"}},
         "required": ["name", "arguments"], "additionalProperties": False}
        for function in _functions(tools) if only is None or function["name"] == only
    ]
    return variants[0] if len(variants) == 1 else {"oneOf": variants}


def grammar(tools: Sequence[Mapping[str, Any]], choice: Any) -> str | None:
    """The GBNF grammar of what the model may write: a call (`required`, a named function), a call
    or text (`auto`), or None (no tools, `none`)."""
    if not _functions(tools) or choice == "none":
        return None
    only = choice["function"]["name"] if isinstance(choice, Mapping) and isinstance(choice.get("function"), Mapping) else None
    # Bounded as response_format is (json_grammar): arguments that parse, closed well within the output cap.
    rules = _ROOT.sub("call ::=", schema_grammar(_call_schema(tools, only)), count=1)
    tool_call = f'tool-call ::= "{OPEN}" call "{CLOSE}"'
    if choice in ("required",) or only is not None:
        return f"root ::= tool-call\n{tool_call}\n{rules}"
    # auto: a call, or any text that does not begin like one.
    return f"root ::= tool-call | text\ntext ::= [^<] [^\\x00]*\n{tool_call}\n{rules}"


def parse_call(text: str) -> tuple[str, str] | None:
    """(name, arguments JSON) of a call the model wrote, or None if it answered in text."""
    stripped = text.strip()
    if not stripped.startswith(OPEN):
        return None
    body = stripped[len(OPEN):].removesuffix(CLOSE).strip()
    try:
        call = json.loads(body)
    except ValueError:
        return None
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        return None
    return call["name"], json.dumps(call.get("arguments") or {}, ensure_ascii=False)


def unfinished_call(text: str) -> bool:
    """Whether `text`, which `parse_call` did not read as a call, is one cut off (the token limit
    reached mid-call): the grammar lets text begin like a call only when it is one."""
    stripped = text.lstrip()
    return bool(stripped) and (stripped.startswith(OPEN) or OPEN.startswith(stripped))


def tool_message(message: Mapping[str, Any], tools_offered: bool = True) -> dict[str, Any] | None:
    """A chat message in a form any chat template renders: an assistant's calls as the text the
    model writes for them, a tool's result as a user message that says what it is. When this
    request offers no tools, an assistant's calls are left out (None for a message that was only
    calls): a small model shown its calls, as markup or in words, writes them again as its answer."""
    if message.get("role") == "assistant" and message.get("tool_calls"):
        if not tools_offered:
            return {"role": "assistant", "content": message["content"]} if message.get("content") else None
        calls = "".join(f"{OPEN}{json.dumps({'name': call['function']['name'], 'arguments': _parsed(call['function'].get('arguments'))})}{CLOSE}"
                        for call in message["tool_calls"] if isinstance(call, Mapping) and isinstance(call.get("function"), Mapping))
        return {"role": "assistant", "content": f"{message.get('content') or ''}{calls}"}
    if message.get("role") == "tool":
        return {"role": "user", "content": f"Tool result: {_text(message.get('content'))}"}
    return {"role": message.get("role") or "user", "content": _text(message.get("content"))}


def _parsed(arguments: Any) -> Any:
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except ValueError:
            return arguments
    return arguments or {}


def _text(content: Any) -> str:
    """Text of a content string or of its text parts (images and files do not reach a text model)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, Mapping) and part.get("type") in ("text", "input_text"))
    return ""


def without_markup(text: str) -> str:
    """`text` without the markup of tool calls (whole ones, and one cut off at its end): a model
    imitating calls it saw, where no tool was offered, writes them as text no client should get."""
    return _MARKUP.sub("", text)


class MarkupFilter:
    """`without_markup` for a stream, piece by piece: text goes out as it comes, but for what may be
    the start of a call's markup, held until it is known not to be (or dropped with the call)."""

    def __init__(self) -> None:
        self.held = ""
        self.inside = False

    def feed(self, text: str) -> str:
        """What of the text so far goes out now."""
        self.held += text
        out: list[str] = []
        while True:
            if self.inside:
                end = self.held.find(CLOSE)
                if end < 0:
                    self.held = self.held[-(len(CLOSE) - 1):]  # only what may be the start of the close
                    return "".join(out)
                self.held, self.inside = self.held[end + len(CLOSE):], False
                continue
            start = self.held.find(OPEN)
            if start >= 0:
                out.append(self.held[:start])
                self.held, self.inside = self.held[start + len(OPEN):], True
                continue
            keep = _partial_open(self.held)
            out.append(self.held[:len(self.held) - keep])
            self.held = self.held[len(self.held) - keep:]
            return "".join(out)

    def end(self) -> str:
        """What is left to go out at the answer's end: text held that was not a call after all."""
        held, self.held = ("" if self.inside else self.held), ""
        return held


def _partial_open(text: str) -> int:
    """How many characters at the end of `text` are a proper start of OPEN."""
    for size in range(min(len(OPEN) - 1, len(text)), 0, -1):
        if OPEN.startswith(text[-size:]):
            return size
    return 0
