"""The built-in vector stores' pure parts: chunking by tokens with overlap, and text extraction."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from providers.vector_stores.builtin.chunking import chunk_text
from providers.vector_stores.builtin.extract import ExtractionError, text_pieces
from support.documents import pdf_with_text


async def pieces(*parts: str) -> AsyncIterator[str]:
    for part in parts:
        yield part


async def chunks(text_parts: list[str], size: int, overlap: int) -> list[str]:
    return [chunk async for chunk in chunk_text(pieces(*text_parts), size, overlap)]


async def test_chunks_have_the_size_asked_and_overlap_by_the_amount_asked() -> None:
    words = [f"w{i}" for i in range(25)]
    got = await chunks([" ".join(words)], 10, 4)
    assert [chunk.split() for chunk in got] == [words[0:10], words[6:16], words[12:22], words[18:25]]


async def test_chunking_does_not_depend_on_how_the_text_arrives() -> None:
    text = "The keeper, at dusk, trims the wick; then winds the clock. " * 40
    whole = await chunks([text], 100, 20)
    assert await chunks([text[i:i + 7] for i in range(0, len(text), 7)], 100, 20) == whole
    assert len(whole) > 3 and all(chunk in text for chunk in whole)


async def test_a_short_text_is_one_chunk_and_an_empty_one_none() -> None:
    assert await chunks(["  just a few words  "], 100, 0) == ["just a few words"]
    assert await chunks(["   ", "\n"], 100, 0) == []


async def extract(data: bytes, name: str, size: int = 5) -> str:
    async def source() -> AsyncIterator[bytes]:
        for start in range(0, len(data), size):
            yield data[start:start + size]

    return "".join([piece async for piece in text_pieces(source(), name)])


async def test_utf8_split_across_reads_is_decoded_whole() -> None:
    assert await extract("Ærø — ünïcode ✓".encode(), "notes.txt", size=3) == "Ærø — ünïcode ✓"


async def test_html_gives_its_text_without_scripts_or_styles() -> None:
    html = b"<html><head><title>T</title><style>p{}</style></head><body><p>One &amp; two</p><script>x()</script><p>three</p></body></html>"
    text = await extract(html, "page.html")
    assert "One & two" in text and "three" in text and "x()" not in text and "p{}" not in text


async def test_a_pdf_gives_the_text_of_its_pages() -> None:
    assert "The fog horn sounds" in await extract(pdf_with_text("The fog horn sounds"), "manual.pdf", size=64)


@pytest.mark.parametrize(("data", "name", "code"), [
    (bytes(range(256)) * 4, "blob.bin", "unsupported_file"),
    (b"%PDF-1.7 not really", "fake.pdf", "invalid_file"),
])
async def test_what_cannot_be_read_says_why(data: bytes, name: str, code: str) -> None:
    with pytest.raises(ExtractionError) as failed:
        await extract(data, name, size=64)
    assert failed.value.code == code and name in failed.value.message


async def test_nul_characters_are_left_out_of_the_text() -> None:
    # They mean nothing in a document, and PostgreSQL stores no text holding one.
    assert await extract(b"The keeper\x00 lights\x00\x00 the lamp.", "notes.txt", size=4) == "The keeper lights the lamp."
