"""Turn pydantic validation errors into ConfigErrors that read like the YAML they are about."""

from __future__ import annotations

import types
import typing
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ValidationError

from builder.errors import ConfigError, PathPart, format_path

__all__ = ["validate_model"]

ModelT = typing.TypeVar("ModelT", bound=BaseModel)


def validate_model(model: type[ModelT], data: Any, path: Sequence[PathPart] = ()) -> ModelT:
    """`model.model_validate(data)`, raising one ConfigError that lists every problem by path."""
    try:
        return model.model_validate(data)
    except ValidationError as error:
        lines = [_describe(model, path, detail) for detail in error.errors(include_url=False)]
        raise ConfigError("\n".join(lines) if len(lines) == 1 else "\n  " + "\n  ".join(lines)) from None


def _describe(model: type[BaseModel], prefix: Sequence[PathPart], detail: Any) -> str:
    loc: tuple[PathPart, ...] = tuple(detail["loc"])
    where = format_path((*prefix, *loc))
    kind = detail["type"]
    if kind == "extra_forbidden":
        allowed = _allowed_keys(model, loc[:-1])
        hint = f" (expected one of: {', '.join(allowed)})" if allowed else ""
        return f"{where}: unknown key{hint}"
    if kind == "missing":
        return f"{where}: required setting is missing"
    return f"{where}: {detail['msg'].rstrip('.')} (got {_short(detail.get('input'))})"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _allowed_keys(model: type[BaseModel], loc: Sequence[PathPart]) -> list[str]:
    """The field names of the model found at `loc`, walking field annotations; [] if unsure."""
    current: Any = model
    for part in loc:
        current = _step(current, part)
        if current is None:
            return []
    models = [m for m in _models_in(current)]
    return sorted({name for m in models for name in m.model_fields}) if models else []


def _step(annotation: Any, part: PathPart) -> Any:
    for candidate in _models_in(annotation):
        if isinstance(part, str) and part in candidate.model_fields:
            return candidate.model_fields[part].annotation
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (list, tuple, Sequence) and isinstance(part, int) and args:
        return args[0]
    if origin is dict and isinstance(part, str) and len(args) == 2:
        return args[1]
    if origin in (typing.Union, types.UnionType) or origin is typing.Annotated:
        for arg in args:
            found = _step(arg, part)
            if found is not None:
                return found
        # A discriminated union puts the tag in the path: `backends.x.sqlite.path`.
        for candidate in _models_in(annotation):
            if part == getattr(candidate.model_fields.get("type"), "default", None) or _tag_of(candidate) == part:
                return candidate
    return None


def _tag_of(model: type[BaseModel]) -> str | None:
    field = model.model_fields.get("type")
    if field is None:
        return None
    args = typing.get_args(field.annotation)
    return str(args[0]) if len(args) == 1 else None


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType) or origin is typing.Annotated:
        args = typing.get_args(annotation)
        if origin is typing.Annotated:
            args = args[:1]
        return [m for arg in args for m in _models_in(arg)]
    return []
