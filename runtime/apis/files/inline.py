"""Files named by id in a model's input, turned into what any chat model reads: the text of a text
file or a PDF, an image as a data URL. Used by Responses (`input_file`, `input_image` with a
`file_id`) and by chat completions (`file` parts with a `file_id`).

Text goes in as text rather than as a `file` part because few OpenAI-compatible servers take file
parts; a PDF's text is extracted with pypdf. Other kinds of file are a 400 naming the part.
"""

from __future__ import annotations

import asyncio
import base64
import io
import mimetypes
from dataclasses import dataclass
from typing import Any

from contract.errors import InvalidRequestError
from contract.files.protocol import FilesProvider

__all__ = ["MAX_INLINE_BYTES", "Inlined", "chat_messages_with_files", "inline_file", "pdf_pages", "pdf_text"]

MAX_INLINE_BYTES = 32 * 1024 * 1024
"""The largest file given to a model inline (an image, or a document to read as text)."""
_TEXT_SUFFIXES = (".txt", ".md", ".markdown", ".csv", ".json", ".jsonl", ".xml", ".html", ".htm", ".py", ".js", ".ts", ".yaml",
                  ".yml", ".toml", ".ini", ".log", ".rst", ".tex", ".sql", ".sh", ".java", ".c", ".h", ".cpp", ".go", ".rs")


@dataclass(frozen=True)
class Inlined:
    """A file as a model reads it: `text` (with its name), or an image's data URL."""

    filename: str
    text: str | None = None
    image_url: str | None = None


async def inline_file(files: FilesProvider | None, file_id: str, param: str) -> Inlined:
    if files is None:
        raise InvalidRequestError(f"Invalid '{param}': file ids need the files API, which this server does not serve.", param=param,
                                  code="invalid_value")
    content = await files.file_content(file_id)
    if content.size > MAX_INLINE_BYTES:
        raise InvalidRequestError(f"Invalid '{param}': the file {file_id} is too large to give to a model ({content.size} bytes; at most "
                                  f"{MAX_INLINE_BYTES}).", param=param, code="invalid_value")
    data = b"".join([chunk async for chunk in content.chunks])
    name = content.filename
    kind = mimetypes.guess_type(name)[0] or ""
    if kind.startswith("image/") or data[:8] == b"\x89PNG\r\n\x1a\n" or data[:3] == b"\xff\xd8\xff":
        kind = kind if kind.startswith("image/") else ("image/png" if data[:4] == b"\x89PNG" else "image/jpeg")
        return Inlined(name, image_url=f"data:{kind};base64,{base64.b64encode(data).decode()}")
    if data[:5] == b"%PDF-" or name.lower().endswith(".pdf"):
        return Inlined(name, text=await asyncio.to_thread(_pdf_text, data, name, param))
    if name.lower().endswith(_TEXT_SUFFIXES) or kind.startswith("text/") or _looks_like_text(data):
        return Inlined(name, text=data.decode("utf-8", errors="replace"))
    raise InvalidRequestError(f"Invalid '{param}': the file {file_id} ({name}) is neither text, a PDF nor an image, which is what a model "
                              "can be given.", param=param, code="invalid_value")


async def chat_messages_with_files(messages: list[Any], files: FilesProvider | None) -> list[Any]:
    """Chat messages whose `file` parts name a `file_id` carry the file instead: its text (a text
    file, a PDF) as a `text` part headed by its name, an image as an `image_url` part."""
    read: list[Any] = []
    for index, message in enumerate(messages):
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list) or not any(_names_file(part) for part in content):
            read.append(message)
            continue
        parts = []
        for number, part in enumerate(content):
            if not _names_file(part):
                parts.append(part)
                continue
            param = f"messages[{index}].content[{number}].file.file_id"
            inlined = await inline_file(files, str(part["file"]["file_id"]), param)
            if inlined.image_url is not None:
                parts.append({"type": "image_url", "image_url": {"url": inlined.image_url}})
            else:
                parts.append({"type": "text", "text": f"[File: {inlined.filename}]\n{inlined.text}"})
        read.append({**message, "content": parts})
    return read


def _names_file(part: Any) -> bool:
    return (isinstance(part, dict) and part.get("type") == "file" and isinstance(part.get("file"), dict)
            and isinstance(part["file"].get("file_id"), str))


async def pdf_text(data: bytes, name: str, param: str) -> str:
    """The text of a PDF (sent inline, not by id), read on a thread; a 400 naming `param` if it is no PDF."""
    return await asyncio.to_thread(_pdf_text, data, name, param)


async def pdf_pages(data: bytes, name: str, param: str) -> list[str]:
    """The text of each page of a PDF (sent inline), in order, read on a thread; a 400 naming `param` if it is no PDF."""
    return await asyncio.to_thread(_pdf_pages, data, name, param)


def _pdf_text(data: bytes, name: str, param: str) -> str:
    pages = _pdf_pages(data, name, param)
    return "\n\n".join(page.strip() for page in pages if page.strip())


def _pdf_pages(data: bytes, name: str, param: str) -> list[str]:
    from pypdf import PdfReader
    from pypdf.errors import PdfReadError

    try:
        reader = PdfReader(io.BytesIO(data))
        return [page.extract_text() or "" for page in reader.pages]
    except (PdfReadError, ValueError, KeyError, OSError) as error:
        raise InvalidRequestError(f"Invalid '{param}': the PDF {name} could not be read ({error}).", param=param,
                                  code="invalid_value") from None


def _looks_like_text(data: bytes) -> bool:
    head = data[:4096]
    if b"\x00" in head:
        return False
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as error:
        return error.start > len(head) - 4  # a character cut at the end of the sample
    return True
