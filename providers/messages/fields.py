"""The shape checks the Messages checks are built of, each refusal worded as Anthropic words it.

Anthropic validates a request with pydantic models and answers the first problem as
`{location}: {pydantic's message}`: "max_tokens: Field required", "messages.0.role: Input should be
'user' or 'assistant'", "tools.0.custom.name: String should match pattern '^[a-zA-Z0-9_-]{1,128}$'".
Its location names each tagged union's tag (the `custom` above, `tool_use` in
"messages.1.content.1.tool_use.id: Field required", `enabled` in
"thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"), so a `Where`
carries two paths: that location, for the message, and the field's path in the body (no tags), for
the error's `param`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from contract.errors import InvalidRequestError

__all__ = ["ROOT", "Check", "Where", "anything", "boolean", "dictionary", "fields", "integer", "list_of", "literal",
           "nullable", "number", "refuse", "str_or_list", "tagged", "text"]


class Where:
    """Where a value is: Anthropic's location of it (with tags) and its path in the body. Both are
    spelt out only when a refusal reads them: checking a valid request builds no strings."""

    __slots__ = ("_loc", "_param", "_parent", "_name", "_tag")

    def __init__(self, loc: str | None = None, param: str | None = None, *, parent: Where | None = None, name: str | int = "",
                 tag: bool = False) -> None:
        self._loc, self._param = loc, param
        self._parent, self._name, self._tag = parent, name, tag

    def key(self, name: str | int) -> Where:
        return Where(parent=self, name=name)

    def tagged(self, tag: str) -> Where:
        return Where(parent=self, name=tag, tag=True)

    @property
    def loc(self) -> str:
        if self._loc is None:
            base = self._parent.loc if self._parent is not None else ""
            self._loc = f"{base}.{self._name}" if base else str(self._name)
        return self._loc

    @property
    def param(self) -> str:
        if self._param is None:
            base = self._parent.param if self._parent is not None else ""
            self._param = base if self._tag else (f"{base}.{self._name}" if base else str(self._name))
        return self._param


ROOT = Where("", "")

Check = Callable[[Any, Where], None]
"""A value's check: returns, or raises the InvalidRequestError naming the first problem."""


def refuse(where: Where, message: str) -> InvalidRequestError:
    """The 400 for `message` at `where`: "loc: message", with the field's path as `param`."""
    return InvalidRequestError(f"{where.loc}: {message}" if where.loc else message, param=where.param or None)


def anything(value: Any, where: Where) -> None:
    """Any value: a field the translation drops, whose shape is the upstream's concern or nobody's."""


def text(value: Any, where: Where) -> None:
    if not isinstance(value, str):
        raise refuse(where, "Input should be a valid string")


def boolean(value: Any, where: Where) -> None:
    if not isinstance(value, bool):
        raise refuse(where, "Input should be a valid boolean")


def dictionary(value: Any, where: Where) -> None:
    if not isinstance(value, dict):
        raise refuse(where, "Input should be a valid dictionary")


def integer(minimum: int | None = None) -> Check:
    def check(value: Any, where: Where) -> None:
        if not isinstance(value, int) or isinstance(value, bool):
            raise refuse(where, "Input should be a valid integer")
        if minimum is not None and value < minimum:
            raise refuse(where, f"Input should be greater than or equal to {minimum}")
    return check


def number(low: float, high: float) -> Check:
    def check(value: Any, where: Where) -> None:
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise refuse(where, "Input should be a valid number")
        if value < low:
            raise refuse(where, f"Input should be greater than or equal to {low:g}")
        if value > high:
            raise refuse(where, f"Input should be less than or equal to {high:g}")
    return check


def _choices(values: tuple[str, ...]) -> str:
    quoted = [f"'{value}'" for value in values]
    return quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"


def literal(*values: str) -> Check:
    def check(value: Any, where: Where) -> None:
        if value not in values or not isinstance(value, str):
            raise refuse(where, f"Input should be {_choices(values)}")
    return check


def nullable(inner: Check) -> Check:
    def check(value: Any, where: Where) -> None:
        if value is not None:
            inner(value, where)
    return check


def list_of(item: Check) -> Check:
    def check(value: Any, where: Where) -> None:
        if not isinstance(value, list):
            raise refuse(where, "Input should be a valid list")
        for index, element in enumerate(value):
            item(element, where.key(index))
    return check


def str_or_list(item: Check) -> Check:
    """A string, or a list whose items pass `item` (a content's two shapes)."""
    items = list_of(item)

    def check(value: Any, where: Where) -> None:
        if not isinstance(value, str):
            items(value, where)
    return check


def fields(required: Mapping[str, Check], optional: Mapping[str, Check] | None = None) -> Check:
    """An object with these fields and no others (Anthropic's models forbid extra inputs)."""
    known = {**required, **(optional or {})}

    def check(value: Any, where: Where) -> None:
        dictionary(value, where)
        for name in required:
            if name not in value:
                raise refuse(where.key(name), "Field required")
        for name, field_check in known.items():
            if name in value:
                field_check(value[name], where.key(name))
        for name in value:
            if name not in known:
                raise refuse(where.key(name), "Extra inputs are not permitted")
    return check


def tagged(members: Mapping[str, Check], *, default: str | None = None) -> Check:
    """A union told apart by its `type` (`default` when it has none, as a custom tool has none)."""
    expected = ", ".join(f"'{tag}'" for tag in members)

    def check(value: Any, where: Where) -> None:
        dictionary(value, where)
        kind = value.get("type") if value.get("type") is not None else default
        if kind is None:
            raise refuse(where, "Unable to extract tag using discriminator 'type'")
        if not isinstance(kind, str) or kind not in members:
            raise refuse(where, f"Input tag '{kind}' found using 'type' does not match any of the expected tags: {expected}")
        members[kind](value, where.tagged(kind))
    return check
