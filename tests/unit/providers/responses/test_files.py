"""Files named by id in a response's context, as the model is given them."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from typing import Any

import pytest

from fake_mcp.servers import PNG
from providers.responses.files import with_files_read
from contract.files.protocol import FileContent
from contract.errors import InvalidRequestError, NotFoundError
from support.documents import pdf_with_text


class Files:
    """A files provider in memory."""

    def __init__(self, **stored: tuple[str, bytes]) -> None:
        self.stored = stored
        self.max_file_bytes = 1 << 20

    async def file_content(self, file_id: str) -> FileContent:
        if file_id not in self.stored:
            raise NotFoundError(f"No such File object: {file_id}")
        name, data = self.stored[file_id]

        async def chunks() -> AsyncIterator[bytes]:
            yield data

        return FileContent(chunks(), len(data), name)


def message(*parts: dict[str, Any]) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": list(parts)}


async def test_text_pdfs_and_images_are_read_and_other_items_are_left_as_they_are() -> None:
    files: Any = Files(a=("a.txt", b"alpha"), p=("p.pdf", pdf_with_text("Hello PDF")), i=("i.png", PNG))
    plain = message({"type": "input_text", "text": "hi"})
    [same, read] = await with_files_read([plain, message({"type": "input_file", "file_id": "a"}, {"type": "input_file", "file_id": "p"},
                                                         {"type": "input_image", "file_id": "i", "detail": "low"})], files)
    assert same is plain
    assert read["content"] == [
        {"type": "input_text", "text": "[File: a.txt]\nalpha"},
        {"type": "input_text", "text": "[File: p.pdf]\nHello PDF"},
        {"type": "input_image", "image_url": f"data:image/png;base64,{base64.b64encode(PNG).decode()}", "detail": "low"},
    ]


async def test_an_image_part_naming_a_text_file_is_a_400_and_binary_files_too() -> None:
    files: Any = Files(a=("a.txt", b"alpha"), z=("z.bin", bytes(range(256)) * 10))
    with pytest.raises(InvalidRequestError) as error:
        await with_files_read([message({"type": "input_image", "file_id": "a"})], files)
    assert error.value.param == "input[0].content[0].file_id"
    with pytest.raises(InvalidRequestError, match="neither text, a PDF nor an image"):
        await with_files_read([message({"type": "input_file", "file_id": "z"})], files)
    with pytest.raises(InvalidRequestError, match="could not be read"):
        await with_files_read([message({"type": "input_file", "file_id": "p"})], Files(p=("broken.pdf", b"%PDF-1.4 garbage")))  # type: ignore[arg-type]
