"""Text cut into overlapping chunks of at most N tokens, as it streams in.

Tokens are counted as words and punctuation marks (a regular expression), which is close to,
and a little under, what a BPE tokenizer counts for English prose; no tokenizer is loaded for
it. A chunk is an exact slice of the text: its first token to its last, whitespace kept.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

__all__ = ["chunk_text"]

_TOKEN = re.compile(r"\w+|[^\w\s]", re.UNICODE)


async def chunk_text(pieces: AsyncIterator[str], max_tokens: int, overlap: int) -> AsyncIterator[str]:
    """Chunks of `max_tokens` tokens, each starting `max_tokens - overlap` tokens after the last."""
    step = max(1, max_tokens - overlap)
    buffer = ""
    async for piece in pieces:
        buffer += piece
        spans = [match.span() for match in _TOKEN.finditer(buffer)]
        first = 0
        # A token may go on past the end of the buffer: the last one waits for the next piece.
        while len(spans) - first > max_tokens:
            yield buffer[spans[first][0]:spans[first + max_tokens - 1][1]]
            first += step
        buffer = buffer[spans[first][0]:] if first else buffer
    spans = [match.span() for match in _TOKEN.finditer(buffer)]
    first = 0
    while first < len(spans):
        yield buffer[spans[first][0]:spans[min(first + max_tokens, len(spans)) - 1][1]]
        if len(spans) - first <= max_tokens:
            return
        first += step
