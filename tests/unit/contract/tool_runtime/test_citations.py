"""Source markers in a streamed answer become annotations; everything else passes as written."""

from __future__ import annotations

from typing import Any

import pytest

from contract.tool_runtime.citations import MarkerCitations, Source, numbered_sources

SOURCES = [Source({"type": "file_citation", "file_id": "file-a", "filename": "a.md"}, "The keeper sounds the horn in thick fog."),
           Source({"type": "file_citation", "file_id": "file-b", "filename": "b.md"}, "Spring tides follow the full moon.")]


def run(pieces: list[str], sources: list[Source] = SOURCES) -> tuple[str, list[dict[str, Any]], list[str]]:
    citations = MarkerCitations(sources)
    out: list[str] = []
    annotations: list[dict[str, Any]] = []
    for piece in pieces:
        text, found = citations.feed(piece)
        out.append(text)
        annotations += found
    text, found = citations.finish()
    out.append(text)
    return "".join(out), annotations + found, out


def ids(annotations: list[dict[str, Any]]) -> list[tuple[str, int]]:
    return [(a["file_id"], a["index"]) for a in annotations]


@pytest.mark.parametrize("pieces", [
    ["Horn in fog [1]. Tides [2]."],
    ["Horn", " in", " fog", " [1].", " Tides", " [2]."],
    ["Horn in fog ", "[", "1", "]", ". Tides [", "2].", ""],
    ["Horn in fog 【1】. Tides 【2†source】."],
])
def test_markers_are_taken_out_and_cited_where_they_stood(pieces: list[str]) -> None:
    text, annotations, _ = run(pieces)
    assert text == "Horn in fog. Tides."
    assert ids(annotations) == [("file-a", len("Horn in fog")), ("file-b", len("Horn in fog. Tides"))]


def test_a_marker_may_name_several_sources() -> None:
    text, annotations, _ = run(["Both [1, 2] agree."])
    assert text == "Both agree." and ids(annotations) == [("file-a", 4), ("file-b", 4)]


def test_brackets_that_name_no_source_are_left_as_written() -> None:
    text, annotations, _ = run(["Item [3] of list[0] and [x] and [", "2024", "]."])
    assert text == "Item [3] of list[0] and [x] and [2024]." and annotations == []


def test_text_is_held_back_only_while_a_marker_may_be_starting() -> None:
    _, _, out = run(["The horn", " sounds [", "1] now"])
    assert out[:3] == ["The horn", " sounds", " now"]  # " [" waited for "1]", then went with it


def test_an_answer_without_markers_cites_the_sources_it_shares_words_with() -> None:
    text, annotations, _ = run(["In thick fog the keeper sounds the horn."])
    assert ids(annotations) == [("file-a", len(text))]


def test_an_answer_unrelated_to_the_sources_cites_nothing() -> None:
    assert run(["Hello there, how can I help?"])[1] == []


def test_sources_are_numbered_for_the_model_with_how_to_cite_them() -> None:
    rendered = numbered_sources(SOURCES, lambda n, s: f"[{n}] {s.annotation['filename']}\n{s.text}")
    assert rendered.startswith("[1] a.md\nThe keeper") and "[2] b.md\nSpring" in rendered and "[1]." in rendered
    assert numbered_sources([], lambda n, s: "") == "No results were found."


PAGES = [Source({"type": "url_citation", "url": "https://a.example/fog", "title": "Fog"}, "The keeper sounds the horn in thick fog."),
         Source({"type": "url_citation", "url": "https://b.example/tides", "title": "Tides"}, "Spring tides follow the full moon.")]


@pytest.mark.parametrize("pieces", [
    ["In fog the keeper sounds the horn [1]. Spring tides follow the moon [2]."],
    ["In fog the keeper sounds the horn.", " [1] Spring tides follow", " the moon. [2]"],
    ["In fog the keeper ", "sounds the horn 【1†source】. Spring tides follow the moon [", "2]."],
])
def test_a_web_page_is_cited_over_the_sentence_that_uses_it(pieces: list[str]) -> None:
    text, annotations, _ = run(pieces, PAGES)
    spans = [(a["url"], text[a["start_index"]:a["end_index"]].rstrip(".")) for a in annotations]
    assert spans == [("https://a.example/fog", "In fog the keeper sounds the horn"),
                     ("https://b.example/tides", "Spring tides follow the moon")]
    assert all("index" not in a and a["title"] in ("Fog", "Tides") for a in annotations)


def test_an_uncited_answer_drawn_from_a_page_cites_it_over_the_whole_answer() -> None:
    text, annotations, _ = run(["The keeper sounds the horn in thick fog, twice a minute."], PAGES)
    assert [(a["url"], a["start_index"], a["end_index"]) for a in annotations] == [("https://a.example/fog", 0, len(text))]
