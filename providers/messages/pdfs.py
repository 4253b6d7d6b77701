"""PDF documents sent inline (base64), read as their text: few chat models take a PDF. Used by
the chat translation (`builtin.py`) and the server tools' (`via_responses.py`)."""

from __future__ import annotations

import base64

from contract.errors import InvalidRequestError
from runtime.apis.files.inline import pdf_text

__all__ = ["PDF_DATA_URL", "pdf_bytes", "pdf_as_text"]

PDF_DATA_URL = "data:application/pdf;base64,"


def pdf_bytes(data: str, where: str) -> bytes:
    """A document's base64 data decoded; a 400 naming `where` when it is not base64."""
    try:
        return base64.b64decode(data, validate=True)
    except ValueError:
        raise InvalidRequestError(f"{where}: the document's base64 data is not valid base64.", param="messages") from None


async def pdf_as_text(data: str, name: str, where: str) -> str:
    """The PDF's text, headed by its name, as the model reads it."""
    return f"{name}:\n{await pdf_text(pdf_bytes(data, where), name, 'messages')}"
