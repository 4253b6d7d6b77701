"""Documents with citations enabled over a chat model: the documents shown in numbered sentences,
the model asked for their markers, and its markers turned into Anthropic's citations, whole and
streamed, every Message and event checked by the anthropic SDK's own types."""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import pytest
from anthropic.lib.streaming._messages import accumulate_event
from anthropic.types import Message, RawMessageStreamEvent
from pydantic import TypeAdapter
from support.documents import pdf_with_pages

from providers.messages.citations import (
    INSTRUCTION,
    CitedDocuments,
    citable_pdfs,
    cited_blocks,
    cited_documents,
    sentences,
)
from providers.messages.request import chat_body
from providers.messages.response import message_from_chat
from providers.messages.stream import MessageStream
from runtime.apis.files.inline import pdf_pages

EVENT = TypeAdapter(RawMessageStreamEvent)
TEXT = "The grass is green. The sky is blue!\nWater is wet"
ON = {"enabled": True}


def text_document(data: str = TEXT, **extra: Any) -> dict[str, Any]:
    return {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": data}, "citations": ON, **extra}


def request(*blocks: dict[str, Any], system: Any = None) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "m", "max_tokens": 64,
                            "messages": [{"role": "user", "content": [*blocks, {"type": "text", "text": "What colour?"}]}]}
    if system is not None:
        body["system"] = system
    return body


def completion(text: str) -> dict[str, Any]:
    return {"id": "c", "object": "chat.completion", "created": 1, "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}


def chunk(text: str | None = None, finish: str | None = None) -> dict[str, Any]:
    delta = {"content": text} if text is not None else {}
    return {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def folded(events: list[tuple[str, dict[str, Any]]]) -> Message:
    """The Message the SDK's own accumulator builds of the events, each checked by the SDK's types."""
    snapshot: Any = None
    json_bufs: dict[int, bytes] = {}
    for _, data in events:
        snapshot = accumulate_event(event=EVENT.validate_python(data), current_snapshot=snapshot, json_bufs=json_bufs)
    return Message.model_validate(snapshot.to_dict())


def streamed(pieces: list[str], cited: CitedDocuments | None) -> tuple[list[tuple[str, dict[str, Any]]], Message]:
    stream = MessageStream("m", cited=cited)
    events = [*stream.start()]
    for piece in pieces:
        events += stream.feed(chunk(piece))
    events += stream.feed(chunk(finish="stop"))
    events += stream.finish()
    return events, folded(events)


def whole(text: str, cited: CitedDocuments | None) -> dict[str, Any]:
    message = message_from_chat(completion(text), "m", cited=cited)
    Message.model_validate(message)
    return message


# --- the documents, to the model ---------------------------------------------------------------------


def test_sentences_keep_exact_offsets_and_their_trailing_whitespace() -> None:
    assert [TEXT[a:b] for a, b in sentences(TEXT)] == ["The grass is green. ", "The sky is blue!\n", "Water is wet"]
    assert sentences("  \n\nOne.  Two?") == [(4, 10), (10, 14)]
    assert sentences("") == []


def test_a_text_document_is_numbered_and_the_model_asked_for_markers() -> None:
    body = request({"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "Not cited."}},
                   text_document(title='Facts "1"', context="From a test."), system="Be brief.")
    cited = cited_documents(body)
    assert cited is not None
    chat = chat_body(body, "m", stream=False, cited=cited)
    assert chat["messages"][0] == {"role": "system", "content": f"Be brief.\n\n{INSTRUCTION}"}
    parts = chat["messages"][1]["content"]
    assert parts[0] == {"type": "text", "text": "Not cited."}  # citations not enabled: as before
    assert parts[1]["text"] == ('<document index="1" title="Facts &quot;1&quot;">\nFrom a test.\n[1.1] The grass is green.\n'
                                "[1.2] The sky is blue!\n[1.3] Water is wet\n</document>")
    assert cited.citation(1, 2) == {"type": "char_location", "cited_text": "The sky is blue!\n", "document_index": 1,
                                    "document_title": 'Facts "1"', "file_id": None, "start_char_index": 20, "end_char_index": 37}
    assert cited.citation(0, 1) is None and cited.citation(1, 4) is None


def test_without_cited_documents_the_body_is_as_before() -> None:
    body = request(text_document())
    assert chat_body(body, "m", stream=False)["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": TEXT}, {"type": "text", "text": "What colour?"}]}]
    assert cited_documents(request({"type": "text", "text": "hi"})) is None
    assert cited_documents(request(text_document(citations={"enabled": False}))) is None


def test_the_instruction_makes_a_system_message_or_joins_system_blocks() -> None:
    body = request(text_document())
    assert chat_body(body, "m", stream=False, cited=cited_documents(body))["messages"][0] == {"role": "system", "content": INSTRUCTION}
    body = request(text_document(), system=[{"type": "text", "text": "A"}, {"type": "text", "text": "B"}])
    assert chat_body(body, "m", stream=False, cited=cited_documents(body))["messages"][0]["content"][-1] == {"type": "text",
                                                                                                           "text": INSTRUCTION}


def test_a_content_document_cites_blocks_and_counts_documents_of_tool_results() -> None:
    image = {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}
    content = {"type": "document", "citations": ON, "title": "Blocks",
               "source": {"type": "content", "content": [{"type": "text", "text": "First block."}, image,
                                                         {"type": "text", "text": "Third block."}]}}
    earlier = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": [text_document()]}]}
    body = request(content)
    body["messages"][:0] = [earlier, {"role": "assistant", "content": "ok"}]
    cited = cited_documents(body)
    assert cited is not None
    assert cited.citation(1, 3) == {"type": "content_block_location", "cited_text": "Third block.", "document_index": 1,
                                    "document_title": "Blocks", "file_id": None, "start_block_index": 2, "end_block_index": 3}
    assert cited.citation(0, 1) is None and cited.citation(1, 2) is None  # a tool result's document; an image
    parts = chat_body(body, "m", stream=False, cited=cited)["messages"][-1]["content"]
    assert parts[0]["text"] == '<document index="1" title="Blocks">\n[1.1] First block.\n[1.3] Third block.\n</document>'
    assert parts[1] == {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}


def test_a_pdf_cites_pages() -> None:
    data = base64.b64encode(pdf_with_pages("Page one says hello. It is first", "Page two says goodbye")).decode()
    body = request({"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": data},
                    "citations": ON, "title": "Two pages"})
    assert citable_pdfs(body) == [data]
    pages = asyncio.run(pdf_pages(base64.b64decode(data), "two.pdf", "messages"))
    assert len(pages) == 2
    cited = cited_documents(body, {data: pages})
    assert cited is not None
    assert cited.citation(0, 3) == {"type": "page_location", "cited_text": "Page two says goodbye", "document_index": 0,
                                    "document_title": "Two pages", "file_id": None, "start_page_number": 2, "end_page_number": 3}
    assert cited.citation(0, 1)["start_page_number"] == 1  # type: ignore[index]
    assert cited_documents(body) is None  # its pages not read: not cited


# --- the answer --------------------------------------------------------------------------------------


@pytest.fixture
def cited() -> CitedDocuments:
    documents = cited_documents(request(text_document(title="Facts")))
    assert documents is not None
    return documents


def test_a_whole_answer_is_split_at_its_markers(cited: CitedDocuments) -> None:
    message = whole("Intro here. Grass is green [0.1]. The sky is blue and water wet.[0.2][0.3] Done.", cited)
    assert [(block["text"], [c["cited_text"] for c in block["citations"] or ()]) for block in message["content"]] == [
        ("Intro here. ", []),
        ("Grass is green", ["The grass is green. "]),
        (". ", []),
        ("The sky is blue and water wet.", ["The sky is blue!\n", "Water is wet"]),
        (" Done.", []),
    ]
    assert message["content"][0] == {"type": "text", "text": "Intro here. ", "citations": None}
    assert message["content"][1]["citations"][0] == {
        "type": "char_location", "cited_text": "The grass is green. ", "document_index": 0, "document_title": "Facts",
        "file_id": None, "start_char_index": 0, "end_char_index": 20}
    assert TEXT[0:20] == "The grass is green. "


def test_unknown_markers_are_dropped_and_their_text_left_uncited(cited: CitedDocuments) -> None:
    assert cited_blocks("Made up [7.1][0.9]. Real [0.1][0.1]", cited) == [
        {"type": "text", "text": "Made up. ", "citations": None},
        {"type": "text", "text": "Real", "citations": [cited.citation(0, 1)]}]
    assert cited_blocks("[0.1] No text before.", cited) == [{"type": "text", "text": " No text before.", "citations": None}]
    assert cited_blocks("Green.[0.1]\n[0.2] Blue.", cited) == [
        {"type": "text", "text": "Green.", "citations": [cited.citation(0, 1), cited.citation(0, 2)]},
        {"type": "text", "text": "\n Blue.", "citations": None}]
    assert cited_blocks("Version [1.2 is not a marker", cited) == [
        {"type": "text", "text": "Version [1.2 is not a marker", "citations": None}]


def test_a_model_that_writes_no_markers_gives_no_citations(cited: CitedDocuments) -> None:
    message = whole("The grass is green.", cited)
    assert message["content"] == [{"type": "text", "text": "The grass is green.", "citations": None}]
    assert whole("The grass is green.", None)["content"] == [{"type": "text", "text": "The grass is green."}]


ANSWER = "Intro here. Grass is green [0.1]. The sky is blue and water wet.[0.2][0.3]\n[0.1] Done [5.5]."


@pytest.mark.parametrize("size", [1, 2, 3, 7, len(ANSWER)])
def test_a_streamed_answer_gives_the_blocks_of_the_whole_one(cited: CitedDocuments, size: int) -> None:
    pieces = [ANSWER[i:i + size] for i in range(0, len(ANSWER), size)]  # markers split across chunks
    events, final = streamed(pieces, cited)
    assert [block.model_dump() for block in final.content] == whole(ANSWER, cited)["content"]
    kinds = [(name, data.get("delta", {}).get("type")) for name, data in events]
    first = kinds.index(("content_block_delta", "citations_delta"))
    assert kinds[first - 1][0] == "content_block_start" and kinds[first + 1] == ("content_block_delta", "text_delta")


def test_text_before_a_sentence_goes_out_before_its_marker_comes(cited: CitedDocuments) -> None:
    stream = MessageStream("m", cited=cited)
    stream.start()
    assert [data["delta"]["text"] for _, data in stream.feed(chunk("Intro here. Grass")) if data["type"] == "content_block_delta"] == [
        "Intro here. "]
    assert stream.feed(chunk(" is green [0")) == []
    events = stream.feed(chunk(".1] More"))
    assert [(data["delta"]["type"], data["delta"].get("text")) for _, data in events if data["type"] == "content_block_delta"] == [
        ("citations_delta", None), ("text_delta", "Grass is green"), ("text_delta", " ")]  # " More" held: its sentence goes on


def test_held_text_goes_out_before_a_tool_call(cited: CitedDocuments) -> None:
    stream = MessageStream("m", cited=cited)
    events = [*stream.start(), *stream.feed(chunk("Let me check"))]
    call = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    events += stream.feed({"choices": [{"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": "tool_calls"}]})
    events += stream.finish()
    snapshot = folded(events)
    assert [block.type for block in snapshot.content] == ["text", "tool_use"]
    assert snapshot.content[0].text == "Let me check"  # type: ignore[union-attr]


def test_without_cited_documents_the_stream_is_unchanged() -> None:
    events, final = streamed(["Grass [0.1]", " is green."], None)
    deltas = [data["delta"] for _, data in events if data["type"] == "content_block_delta"]
    assert deltas == [{"type": "text_delta", "text": "Grass [0.1]"}, {"type": "text_delta", "text": " is green."}]
    assert final.content[0].text == "Grass [0.1] is green."  # type: ignore[union-attr]
