"""An answer's links to the files its code wrote become container_file_citation annotations over the
link, however the text streams in; files it never links are cited at its end."""

from __future__ import annotations

from typing import Any

import pytest

from providers.tool_runtime.code_interpreter.citations import ContainerFileCitations

FILES = [{"id": "cfile_plot", "container_id": "cntr_1", "path": "/mnt/data/plot.png"},
         {"id": "cfile_table", "container_id": "cntr_1", "path": "/mnt/data/out/table.csv"}]


def streamed(text: str, size: int) -> tuple[str, list[dict[str, Any]]]:
    citations = ContainerFileCitations(FILES)
    out: list[str] = []
    annotations: list[dict[str, Any]] = []
    for start in range(0, len(text), size):
        piece, found = citations.feed(text[start:start + size])
        out.append(piece)
        annotations += found
    piece, found = citations.finish()
    return "".join(out) + piece, annotations + found


@pytest.mark.parametrize("size", [1, 2, 3, 7, 1000])
def test_a_link_is_annotated_over_its_target_whatever_the_chunks(size: int) -> None:
    text = "Here is [the chart](sandbox:/mnt/data/plot.png). The table is at /mnt/data/out/table.csv."
    answer, annotations = streamed(text, size)
    assert answer == text
    assert [(a["file_id"], answer[a["start_index"]:a["end_index"]]) for a in annotations] == [
        ("cfile_plot", "sandbox:/mnt/data/plot.png"), ("cfile_table", "/mnt/data/out/table.csv")]
    assert annotations[0] == {"type": "container_file_citation", "container_id": "cntr_1", "file_id": "cfile_plot",
                              "filename": "plot.png", "start_index": 20, "end_index": 46}


def test_files_the_answer_does_not_link_are_cited_at_its_end() -> None:
    answer, annotations = streamed("Done: the chart is ready.", 4)
    assert [(a["file_id"], a["start_index"], a["end_index"]) for a in annotations] == [
        ("cfile_plot", len(answer), len(answer)), ("cfile_table", len(answer), len(answer))]


def test_a_link_to_a_file_the_code_did_not_write_is_left_as_text() -> None:
    answer, annotations = streamed("See sandbox:/mnt/data/other.png and sandbox:/mnt/data/plot.png", 5)
    assert [a["file_id"] for a in annotations] == ["cfile_plot", "cfile_table"]
    assert answer[annotations[0]["start_index"]:annotations[0]["end_index"]] == "sandbox:/mnt/data/plot.png"


def test_text_is_held_back_only_while_a_link_may_be_starting() -> None:
    citations = ContainerFileCitations(FILES)
    assert citations.feed("Plain words ")[0] == "Plain words "
    assert citations.feed("and sand")[0] == "and "  # "sand" may begin "sandbox:"
    assert citations.feed("wich")[0] == "sandwich"
