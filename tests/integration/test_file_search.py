"""The `file_search` tool through the openai SDK, in server and library modes: the model's turns
are replayed, the vector stores are real, and the answer cites the chunks it used."""

from __future__ import annotations

import io
import json
import time
from typing import Any

import openai
import pytest

GUIDE = """# Lighthouse keeping

The keeper trims the wick every evening at dusk and winds the clockwork that turns the lens.

## Fog

In fog the keeper sounds the horn twice a minute until the fog lifts.
"""
TIDES = "Tide tables for the harbour: high water at 06:12 and 18:40; the spring tides come after the full moon.\n"

ASK = '[tool:file_search {"queries": ["fog horn", "tides moon"]}] [answer {"text": "In fog the keeper sounds the horn [1]. Tides follow the moon [2]."}]'


@pytest.fixture
def store(openai_client: openai.OpenAI) -> dict[str, str]:
    ids = {name: openai_client.files.create(file=(name, io.BytesIO(text.encode())), purpose="assistants").id
           for name, text in (("guide.md", GUIDE), ("tides.txt", TIDES))}
    created = openai_client.vector_stores.create(name="coast", file_ids=list(ids.values()))
    deadline = time.monotonic() + 20
    while openai_client.vector_stores.retrieve(created.id).status == "in_progress" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert openai_client.vector_stores.retrieve(created.id).file_counts.completed == 2
    return {"id": created.id, **ids}


def file_search(store: dict[str, str], **extra: Any) -> Any:
    return {"type": "file_search", "vector_store_ids": [store["id"]], **extra}


def test_the_answer_cites_the_chunks_it_used(openai_client: openai.OpenAI, text_model: str, store: dict[str, str]) -> None:
    response = openai_client.responses.create(model=text_model, input=ASK, tools=[file_search(store)],
                                              include=["file_search_call.results"])
    call, message = response.output
    assert call.type == "file_search_call" and call.status == "completed" and call.queries == ["fog horn", "tides moon"]
    assert call.results and call.results[0].file_id == store["guide.md"] and call.results[0].filename == "guide.md"
    assert "horn" in (call.results[0].text or "") and 0 < (call.results[0].score or 0) <= 1
    assert message.type == "message"
    [part] = message.content
    assert part.type == "output_text"
    assert part.text == "In fog the keeper sounds the horn. Tides follow the moon."
    cited = [(a.type, a.file_id, a.filename, a.index) for a in part.annotations]  # type: ignore[union-attr]
    first = ("file_citation", call.results[0].file_id, call.results[0].filename, len("In fog the keeper sounds the horn"))
    assert cited[0] == first and len(cited) == 2 and cited[1][1] == store["tides.txt"]
    assert openai_client.responses.retrieve(response.id, include=["file_search_call.results"]).model_dump() == response.model_dump()


def test_a_streamed_answer_announces_each_citation(openai_client: openai.OpenAI, text_model: str, store: dict[str, str]) -> None:
    events = list(openai_client.responses.create(model=text_model, input=ASK, tools=[file_search(store)], stream=True))
    kinds = [event.type for event in events]
    search = [kind for kind in kinds if kind.startswith("response.file_search_call")]
    assert search == ["response.file_search_call.in_progress", "response.file_search_call.searching", "response.file_search_call.completed"]
    deltas = "".join(event.delta for event in events if event.type == "response.output_text.delta")
    assert deltas == "In fog the keeper sounds the horn. Tides follow the moon."
    added = [event for event in events if event.type == "response.output_text.annotation.added"]
    assert added and added[0].annotation.file_id == store["guide.md"]  # type: ignore[union-attr]
    assert [event.annotation_index for event in added] == list(range(len(added)))
    done = next(event for event in events if event.type == "response.output_text.done")
    assert done.text == deltas and kinds.index("response.output_text.annotation.added") < kinds.index("response.output_text.done")
    final = events[-1].response  # type: ignore[union-attr]
    assert final.output_text == deltas
    assert [a.index for a in final.output[1].content[0].annotations] == [event.annotation.index for event in added]  # type: ignore[union-attr]


def test_an_answer_that_cites_nothing_is_tied_to_its_sources(openai_client: openai.OpenAI, text_model: str, store: dict[str, str]) -> None:
    text = "When there is fog, the keeper sounds the horn twice a minute until it lifts."
    response = openai_client.responses.create(
        model=text_model, input=f'[tool:file_search {{"queries": ["fog"]}}] [answer {json.dumps({"text": text})}]',
        tools=[file_search(store)])
    assert response.output_text == text
    annotations = response.output[1].content[0].annotations  # type: ignore[union-attr]
    assert [(a.file_id, a.index) for a in annotations] == [(store["guide.md"], len(text))]  # type: ignore[union-attr]


def test_brackets_that_name_no_source_stay_in_the_text(openai_client: openai.OpenAI, text_model: str, store: dict[str, str]) -> None:
    text = "See item [7] of the list [a] and array[0]."
    response = openai_client.responses.create(
        model=text_model, input=f'[tool:file_search {{"queries": ["zebra"]}}] [answer {json.dumps({"text": text})}]',
        tools=[file_search(store)])
    assert response.output[0].results in (None, [])  # type: ignore[union-attr]
    assert response.output_text == text and response.output[1].content[0].annotations == []  # type: ignore[union-attr]


def test_filters_and_max_num_results_limit_what_is_found(openai_client: openai.OpenAI, text_model: str, store: dict[str, str]) -> None:
    openai_client.vector_stores.files.update(file_id=store["tides.txt"], vector_store_id=store["id"], attributes={"topic": "tides"})
    response = openai_client.responses.create(
        model=text_model, input='[tool:file_search {"queries": ["fog horn tides moon"]}] [answer {"text": "Done [1]."}]',
        tools=[file_search(store, filters={"type": "eq", "key": "topic", "value": "tides"}, max_num_results=1)],
        include=["file_search_call.results"])
    assert [result.file_id for result in response.output[0].results] == [store["tides.txt"]]  # type: ignore[union-attr]


def test_a_store_that_does_not_exist_is_a_400(openai_client: openai.OpenAI, text_model: str) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        openai_client.responses.create(model=text_model, input="hi", tools=[{"type": "file_search", "vector_store_ids": ["vs_nope"]}])
    assert refused.value.body["param"] == "tools[0].vector_store_ids"  # type: ignore[index]


def test_results_are_shown_only_when_included(openai_client: openai.OpenAI, text_model: str, store: dict[str, str]) -> None:
    response = openai_client.responses.create(model=text_model, input=ASK, tools=[file_search(store)])
    call = response.output[0]
    assert call.type == "file_search_call" and call.status == "completed" and call.results is None
    assert response.output[1].content[0].annotations  # type: ignore[union-attr]  # cited all the same
    assert openai_client.responses.retrieve(response.id).output[0].results is None  # type: ignore[union-attr]
    shown = openai_client.responses.retrieve(response.id, include=["file_search_call.results"]).output[0]
    assert shown.results and shown.results[0].file_id == store["guide.md"]  # type: ignore[union-attr]
    events = list(openai_client.responses.create(model=text_model, input=ASK, tools=[file_search(store)], stream=True))
    done = [event.item for event in events if event.type == "response.output_item.done" and event.item.type == "file_search_call"]
    assert done and done[0].results is None  # type: ignore[union-attr]
    assert events[-1].response.output[0].results is None  # type: ignore[union-attr]
    with pytest.raises(openai.BadRequestError) as refused:
        openai_client.responses.retrieve(response.id, include=["everything"])  # type: ignore[list-item]
    assert refused.value.body["param"] == "include[0]"  # type: ignore[index]


def test_a_conversation_shows_search_results_only_when_included(openai_client: openai.OpenAI, text_model: str, store: dict[str, str]) -> None:
    conversation = openai_client.conversations.create()
    openai_client.responses.create(model=text_model, input=ASK, tools=[file_search(store)], conversation=conversation.id)
    items = openai_client.conversations.items.list(conversation.id, order="asc").data
    call = next(item for item in items if item.type == "file_search_call")
    assert call.results is None  # type: ignore[union-attr]
    shown = openai_client.conversations.items.list(conversation.id, order="asc", include=["file_search_call.results"]).data
    assert next(item for item in shown if item.type == "file_search_call").results  # type: ignore[union-attr]
    one = openai_client.conversations.items.retrieve(call.id, conversation_id=conversation.id, include=["file_search_call.results"])
    assert one.results and openai_client.conversations.items.retrieve(call.id, conversation_id=conversation.id).results is None  # type: ignore[union-attr]
