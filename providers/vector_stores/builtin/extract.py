"""A file's text, as a stream of pieces, in bounded memory.

Plain text and Markdown are decoded as they arrive; HTML goes through the standard library's
incremental parser (its text, without scripts, styles and markup); a PDF is spooled to a
temporary file and read a page at a time with pypdf. What is none of these is refused with
`unsupported_file`; a file that claims a format and is not readable as it is `invalid_file`.
"""

from __future__ import annotations

import codecs
import mimetypes
import tempfile
from collections.abc import AsyncIterator, Iterator

from providers.text import HTMLText

__all__ = ["ExtractionError", "text_pieces"]

TEXT_SUFFIXES = (".txt", ".md", ".markdown", ".rst", ".csv", ".tsv", ".json", ".jsonl", ".xml", ".yaml", ".yml", ".toml", ".ini",
                 ".log", ".tex", ".py", ".js", ".ts", ".java", ".c", ".h", ".cpp", ".go", ".rs", ".rb", ".php", ".sh", ".sql", ".css")
HTML_SUFFIXES = (".html", ".htm", ".xhtml")


class ExtractionError(Exception):
    """Why a file gives no text: `code` is OpenAI's `last_error.code`."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _kind(filename: str, head: bytes) -> str:
    name = filename.lower()
    if head.startswith(b"%PDF-") or name.endswith(".pdf"):
        return "pdf"
    if name.endswith(HTML_SUFFIXES) or head.lstrip()[:15].lower().startswith((b"<!doctype html", b"<html")):
        return "html"
    guessed = mimetypes.guess_type(name)[0] or ""
    if name.endswith(TEXT_SUFFIXES) or guessed.startswith("text/"):
        return "text"
    if b"\x00" not in head[:4096]:
        try:
            head[:4096].decode("utf-8")
            return "text"
        except UnicodeDecodeError as error:
            if error.start > min(len(head), 4096) - 4:  # a character cut at the end of the sample
                return "text"
    return "binary"


async def text_pieces(chunks: AsyncIterator[bytes], filename: str) -> AsyncIterator[str]:
    """The file's text in pieces (of any size, in order), without NUL characters: they mean
    nothing in a document's text (PDF extraction leaves some) and PostgreSQL stores no text
    holding one. Raises ExtractionError."""
    async for piece in _pieces(chunks, filename):
        yield piece.replace("\x00", "") if "\x00" in piece else piece


async def _pieces(chunks: AsyncIterator[bytes], filename: str) -> AsyncIterator[str]:
    iterator = aiter(chunks)
    head = await anext(iterator, b"")
    kind = _kind(filename, head)
    if kind == "binary":
        raise ExtractionError("unsupported_file", f"{filename} is not a supported file type (text, Markdown, HTML or PDF).")
    if kind == "pdf":
        async for piece in _pdf(head, iterator, filename):
            yield piece
        return
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    parser = HTMLText() if kind == "html" else None
    data: bytes | None = head
    while data is not None:
        text = decoder.decode(data)
        if parser is not None:
            parser.feed(text)
            text = parser.take()
        if text:
            yield text
        data = await anext(iterator, None)
    tail = decoder.decode(b"", final=True)
    if parser is not None:
        parser.feed(tail)
        parser.close()
        tail = parser.take()
    if tail:
        yield tail


async def _pdf(head: bytes, rest: AsyncIterator[bytes], filename: str) -> AsyncIterator[str]:
    import asyncio

    with tempfile.TemporaryFile() as spool:
        spool.write(head)
        async for data in rest:
            await asyncio.to_thread(spool.write, data)
        spool.seek(0)
        pages = _pdf_pages(spool, filename)
        while (page := await asyncio.to_thread(next, pages, None)) is not None:
            if page:
                yield page + "\n\n"


def _pdf_pages(handle: object, filename: str) -> Iterator[str]:
    from pypdf import PdfReader
    from pypdf.errors import PyPdfError

    try:
        reader = PdfReader(handle)  # type: ignore[arg-type]
        for page in reader.pages:
            yield (page.extract_text() or "").strip()
    except (PyPdfError, ValueError, KeyError, TypeError, OSError, AssertionError) as error:
        raise ExtractionError("invalid_file", f"{filename} could not be read as a PDF ({type(error).__name__}: {str(error)[:200]}).") from None


