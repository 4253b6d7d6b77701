"""Documents with `citations: {enabled: true}` for a chat model, which has no citation mechanism:
the model is shown each such document in numbered sentences and asked for their markers, and the
markers of its answer are turned into Anthropic's citations. Pure: no I/O (a PDF's pages are read
by the caller, `citable_pdfs` naming them).

    a document, to the model           `<document index="d" title="...">`, then one sentence a line headed by its marker
                                       `[d.s]` (d: the document's `document_index`, s: the sentence's number from 1)
    a plain text source                sentences split after `.`, `!` or `?` before whitespace, and at line ends; a
                                       sentence's span runs to the next one's start (its trailing whitespace, as
                                       Anthropic's `cited_text`): `char_location`
    a base64 PDF                       each page's text so split: `page_location` (1-based, the end exclusive)
    a content source                   each text block one sentence: `content_block_location` (the end exclusive)
    the system message                 `INSTRUCTION`: the markers are to follow the sentences of the answer they back
    the answer                         split at its marker runs (`CitedText`): the sentence before a run is a text
                                       block with a citation per known marker; the markers are removed, and unknown
                                       ones (no such sentence) are dropped

Documents are numbered as Anthropic numbers them: every document of the request in order, those of
tool results too (which are shown as before, not cited); a URL or a Files API document is not cited.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from contract.tool_runtime.citations import sentence_start
from providers.messages.parts import user_parts

__all__ = ["INSTRUCTION", "CitedDocuments", "CitedText", "Span", "citable_pdfs", "cited_blocks", "cited_documents", "sentences"]

INSTRUCTION = (
    "The documents in the user's messages are split into sentences, each headed by its marker [d.s] (document d, sentence s). After each "
    "sentence of your answer that rests on the documents, write the markers of the sentences it uses, such as [0.2] or "
    "[0.1][1.3]. Write nothing else in that form.")

Span = tuple[str, list[dict[str, Any]]]
"""A piece of the answer's text, and its citations (none: the text is not cited)."""

_BREAK = re.compile(r"(?<=[.!?])\s+|\s*\n\s*")
_RUN = re.compile(r"(?:[ \t]*\[\d+\.\d+\])+")
_MARK = re.compile(r"\[(\d+)\.(\d+)\]")
_PARTIAL = re.compile(r"[ \t]*(?:\[\d*(?:\.\d*)?)?")
_OPEN_TAIL = re.compile(r"(?:[ \t]*\[\d+\.\d+\])*[ \t]*(?:\[\d*(?:\.\d*)?)?\Z")


def sentences(text: str) -> list[tuple[int, int]]:
    """The (start, end) of each sentence of `text`: from its first character to the next one's
    start (or the text's end), so `text[start:end]` keeps the whitespace after it."""
    starts = [0, *(match.end() for match in _BREAK.finditer(text))]
    spans: list[tuple[int, int]] = []
    for start, end in zip(starts, [*starts[1:], len(text)]):
        while start < end and text[start].isspace():
            start += 1
        if start < end:
            spans.append((start, end))
    return spans


@dataclass
class CitedDocuments:
    """The request's cited documents: each sentence's citation by its marker, and each document
    block's parts for the chat model (by the block's identity, in the body the state was built from)."""

    citations: dict[tuple[int, int], dict[str, Any]] = field(default_factory=dict)
    rendered: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    blocks: list[Any] = field(default_factory=list)  # kept, so the identities stay theirs

    def citation(self, document: int, sentence: int) -> dict[str, Any] | None:
        return self.citations.get((document, sentence))

    def parts(self, block: Mapping[str, Any]) -> list[dict[str, Any]] | None:
        """The chat parts of a cited document (None: the block is not one)."""
        return self.rendered.get(id(block))


def _documents(body: Mapping[str, Any]) -> Iterator[tuple[Mapping[str, Any], bool]]:
    """Every document block of the request in order, and whether it stands in the user's content (citable)."""
    for message in body.get("messages") or ():
        content = message.get("content")
        if message.get("role") != "user" or not isinstance(content, list):
            continue
        for block in content:
            if block.get("type") == "document":
                yield block, True
            elif block.get("type") == "tool_result" and isinstance(block.get("content"), list):
                yield from ((item, False) for item in block["content"] if item.get("type") == "document")


def _enabled(block: Mapping[str, Any]) -> bool:
    return isinstance(block.get("citations"), Mapping) and block["citations"].get("enabled") is True


def citable_pdfs(body: Mapping[str, Any]) -> list[str]:
    """The base64 data of the PDFs to cite, whose pages the caller reads for `cited_documents`."""
    return [block["source"]["data"] for block, citable in _documents(body)
            if citable and _enabled(block) and block["source"]["type"] == "base64"]


def cited_documents(body: Mapping[str, Any], pdf_pages: Mapping[str, Sequence[str]] | None = None) -> CitedDocuments | None:
    """The state for a request's documents with citations enabled (None: it has none); `pdf_pages`:
    the text of each page of the PDFs `citable_pdfs` names, by their base64 data."""
    cited = CitedDocuments()
    for index, (block, citable) in enumerate(_documents(body)):
        if not (citable and _enabled(block)):
            continue
        source, title = block["source"], block.get("title") if isinstance(block.get("title"), str) else None
        base = {"document_index": index, "document_title": title}
        units: list[tuple[str, dict[str, Any] | None]]
        if source["type"] == "text":
            data = source["data"]
            units = [(data[start:end], {"type": "char_location", "cited_text": data[start:end], **base, "file_id": None,
                                        "start_char_index": start, "end_char_index": end}) for start, end in sentences(data)]
        elif source["type"] == "content":
            units = _content_units(source["content"], base)
        elif source["type"] == "base64" and pdf_pages is not None and source["data"] in pdf_pages:
            units = [(page[start:end], {"type": "page_location", "cited_text": page[start:end], **base, "file_id": None,
                                        "start_page_number": number, "end_page_number": number + 1})
                     for number, page in enumerate(pdf_pages[source["data"]], start=1) for start, end in sentences(page)]
        else:
            continue
        lines = []
        for number, (text, citation) in enumerate(units, start=1):
            if citation is not None:
                cited.citations[(index, number)] = citation
                lines.append(f"[{index}.{number}] {text.strip()}")
        cited.rendered[id(block)] = [_text(_render(block, index, lines)), *_images(source)]
        cited.blocks.append(block)
    return cited if cited.blocks else None


def _content_units(content: str | list[dict[str, Any]], base: dict[str, Any]) -> list[tuple[str, dict[str, Any] | None]]:
    """A content source's blocks, each one unit: a text block's citation, an image none (it keeps its number)."""
    items = [{"type": "text", "text": content}] if isinstance(content, str) else content
    return [(item["text"], {"type": "content_block_location", "cited_text": item["text"], **base, "file_id": None,
                            "start_block_index": position, "end_block_index": position + 1})
            if item["type"] == "text" else ("", None) for position, item in enumerate(items)]


def _images(source: Mapping[str, Any]) -> list[dict[str, Any]]:
    if source["type"] != "content" or isinstance(source["content"], str):
        return []
    return [part for item in source["content"] if item["type"] == "image" for part in user_parts(item)]


def _render(block: Mapping[str, Any], index: int, lines: list[str]) -> str:
    title = f' title="{html.escape(block["title"])}"' if block.get("title") else ""
    context = [block["context"]] if block.get("context") else []
    return "\n".join([f'<document index="{index}"{title}>', *context, *lines, "</document>"])


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


class CitedText:
    """An answer's text as it comes, cut into spans at its marker runs: the sentence before a run
    is cited by the run's known markers; what comes before that sentence is not cited. Text is held
    from the start of its sentence until a run, or the end (`flush`), decides it."""

    def __init__(self, documents: CitedDocuments) -> None:
        self.documents = documents
        self.text = ""

    def feed(self, text: str) -> list[Span]:
        self.text += text
        spans = self._runs(final=False)
        start = sentence_start(self.text[:_OPEN_TAIL.search(self.text).start()])  # type: ignore[union-attr]
        if start > 0:
            spans.append((self.text[:start], []))
            self.text = self.text[start:]
        return spans

    def flush(self) -> list[Span]:
        spans = self._runs(final=True)
        if self.text:
            spans.append((self.text, []))
        self.text = ""
        return spans

    def _runs(self, *, final: bool) -> list[Span]:
        spans: list[Span] = []
        while (run := _RUN.search(self.text)) is not None:
            if not final and _PARTIAL.fullmatch(self.text, run.end()):  # the run may go on in the next text
                break
            before = self.text[:run.start()]
            start = sentence_start(before)
            if start:
                spans.append((before[:start], []))
            citations: list[dict[str, Any]] = []
            for document, sentence in _MARK.findall(run.group()):
                citation = self.documents.citation(int(document), int(sentence))
                if citation is not None and citation not in citations:
                    citations.append(citation)
            sentence = before[start:]
            # Only whitespace since the last run (markers on a line of their own): the run's citations
            # go to that run's sentence, and the whitespace stays text.
            spans += [(sentence, citations)] if sentence.strip() else [("", citations), (sentence, [])]
            self.text = self.text[run.end():]
        return spans


def cited_blocks(text: str, documents: CitedDocuments) -> list[dict[str, Any]]:
    """A whole answer's text as text blocks: a block per cited sentence, with its `citations`, and
    the text between as blocks with `citations: null`, as Anthropic shows uncited text."""
    cutter = CitedText(documents)
    blocks: list[dict[str, Any]] = []
    for piece, citations in [*cutter.feed(text), *cutter.flush()]:
        last = blocks[-1] if blocks else None
        if not piece and citations and last is not None and last["citations"]:  # a run right after a run
            last["citations"] += [citation for citation in citations if citation not in last["citations"]]
        elif piece and not citations and last is not None and not last["citations"]:
            last["text"] += piece
        elif piece:
            blocks.append({"type": "text", "text": piece, "citations": citations or None})
    return blocks
