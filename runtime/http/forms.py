"""Form bodies (application/x-www-form-urlencoded) read as the JSON objects they stand for.

The Open Responses specification lets `POST /v1/responses` (and its compact and input_tokens
routes) take a form as well as JSON; OGX reads one the same way. A form carries only text, so
each value is read as JSON when it is JSON (`stream=true`, `max_output_tokens=64`,
`tools=[{...}]`, `metadata={...}`), except in the fields a route names as text (`input=42` is the
text "42"); a name given twice is a list, and a list field given once is a list of one.
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass
from typing import Any

from contract import fastjson

__all__ = ["FormFields", "form_document"]


@dataclass(frozen=True)
class FormFields:
    """How a route's form fields read where JSON alone would read them wrongly."""

    texts: frozenset[str] = frozenset()
    """Fields whose value is text even when it would parse as a JSON number, boolean or null."""
    lists: frozenset[str] = frozenset()
    """Fields that are lists, so a value given once is a list of one."""


def form_document(body: bytes, fields: FormFields) -> dict[str, Any]:
    """The object a form body stands for."""
    document: dict[str, Any] = {}
    repeated: set[str] = set()
    for name, text in urllib.parse.parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True):
        value = _value(text, name in fields.texts)
        if name in repeated:
            document[name].append(value)
        elif name in document:
            document[name] = [document[name], value]
            repeated.add(name)
        else:
            document[name] = value
    for name in fields.lists & document.keys() - repeated:
        if not isinstance(document[name], list):
            document[name] = [document[name]]
    return document


def _value(text: str, is_text: bool) -> Any:
    try:
        value = fastjson.loads(text)
    except ValueError:
        return text
    if is_text and not isinstance(value, (dict, list)):
        return text
    return value
