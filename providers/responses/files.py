"""Files named by id in a response's context, read in for the model (the items stored keep the ids)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from runtime.apis.files.inline import inline_file
from contract.files.protocol import FilesProvider
from contract.errors import InvalidRequestError

__all__ = ["with_files_read"]

_FILE_PARTS = ("input_file", "input_image")
_PARTS_FIELD = {"message": "content", "function_call_output": "output"}  # where an item's parts are, for the items that have them


async def with_files_read(items: Sequence[dict[str, Any]], files: FilesProvider | None) -> list[dict[str, Any]]:
    """Copies of the items whose `input_file`/`input_image` parts with a `file_id` carry the file
    instead: a text file or a PDF as text, an image as a data URL."""
    read: list[dict[str, Any]] = []
    for index, item in enumerate(items):
        field = _PARTS_FIELD.get(item.get("type", ""))
        parts = item.get(field) if field is not None else None
        if field is None or not isinstance(parts, list) or not any(isinstance(part, dict) and part.get("file_id") and part.get("type") in _FILE_PARTS
                                                  for part in parts):
            read.append(item)
            continue
        content = [await _read_part(part, files, f"input[{index}].{field}[{number}]") for number, part in enumerate(parts)]
        read.append({**item, field: content})
    return read


async def _read_part(part: Any, files: FilesProvider | None, where: str) -> Any:
    if not isinstance(part, dict) or not part.get("file_id") or part.get("type") not in _FILE_PARTS:
        return part
    inlined = await inline_file(files, str(part["file_id"]), f"{where}.file_id")
    if inlined.image_url is not None:
        return {"type": "input_image", "image_url": inlined.image_url, "detail": part.get("detail") or "auto"}
    if part["type"] == "input_image":
        raise InvalidRequestError(f"Invalid '{where}.file_id': the file {part['file_id']} ({inlined.filename}) is not an image.",
                                  param=f"{where}.file_id", code="invalid_value")
    return {"type": "input_text", "text": f"[File: {inlined.filename}]\n{inlined.text}"}
