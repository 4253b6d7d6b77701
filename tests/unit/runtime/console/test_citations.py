"""A stored answer's citations become links: files to their console page, web pages only over
http(s); each target once; the pages escape them."""

from __future__ import annotations

from pathlib import Path

from runtime.console.citations import Link, citations
from runtime.console.pages import response
from support.console_pages import render_page


def test_a_file_citation_links_to_the_files_page_and_a_container_file_to_its_download() -> None:
    part = {"type": "output_text", "text": "Fog [1].", "annotations": [
        {"type": "file_citation", "file_id": "file-abc", "filename": "guide.md", "index": 3},
        {"type": "container_file_citation", "file_id": "cfile_1", "filename": "", "container_id": "c", "start_index": 0, "end_index": 1}]}
    assert citations(part) == [Link("/console/files/file-abc", "guide.md", external=False),
                               Link("/console/containers/c/files/cfile_1/content", "cfile_1", external=False)]


def test_a_file_id_is_quoted_into_the_path() -> None:
    [link] = citations({"annotations": [{"type": "file_citation", "file_id": "../x?y#z", "filename": "f"}]})
    assert link.href == "/console/files/..%2Fx%3Fy%23z"


def test_a_url_citation_links_only_over_http_or_https() -> None:
    part = {"annotations": [
        {"type": "url_citation", "url": "https://example.com/a", "title": "A", "start_index": 0, "end_index": 1},
        {"type": "url_citation", "url": "HTTP://example.com/b", "title": "", "start_index": 0, "end_index": 1},
        {"type": "url_citation", "url": "javascript:alert(1)", "title": "x"},
        {"type": "url_citation", "url": " javascript:alert(1)", "title": "x"},
        {"type": "url_citation", "url": "data:text/html,<script>", "title": "x"},
        {"type": "url_citation", "url": None, "title": "x"}]}
    assert citations(part) == [Link("https://example.com/a", "A", external=True),
                               Link("HTTP://example.com/b", "HTTP://example.com/b", external=True)]


def test_each_target_once_in_the_order_first_cited() -> None:
    note = {"type": "file_citation", "file_id": "file-a", "filename": "a.txt", "index": 1}
    other = {"type": "file_citation", "file_id": "file-b", "filename": "b.txt", "index": 2}
    assert [link.text for link in citations({"annotations": [note, other, {**note, "index": 9}]})] == ["a.txt", "b.txt"]


def test_anything_else_is_no_link() -> None:
    assert citations({"type": "refusal", "refusal": "no"}) == []
    assert citations({"annotations": [{"type": "file_path", "file_id": "file-a", "index": 0}, "junk", {"type": "file_citation"}]}) == []
    assert citations(None) == [] and citations({"annotations": "junk"}) == []


async def test_the_response_page_shows_each_parts_citations_as_escaped_links(tmp_path: Path) -> None:
    text = {"type": "output_text", "text": "Fog [1] and tides.", "annotations": [
        {"type": "file_citation", "file_id": "file-a", "filename": "<img src=x onerror=alert(1)>.md", "index": 3},
        {"type": "url_citation", "url": "javascript:alert(1)", "title": "bad", "start_index": 0, "end_index": 1},
        {"type": "url_citation", "url": "https://example.com/?a=1&b=\"2\"", "title": "Tides", "start_index": 0, "end_index": 1}]}
    stored = {"id": "resp_1", "object": "response", "status": "completed", "model": "m", "created_at": 0,
              "output": [{"type": "message", "id": "msg_1", "role": "assistant", "content": [text]}], "usage": None,
              "previous_response_id": None, "conversation": None, "background": False, "error": None, "tools": []}
    html, _ = await render_page(tmp_path, response, "/console/responses/resp_1", {"/v1/responses/resp_1": (200, stored)})
    assert '<a class="citation" href="/console/files/file-a">&lt;img src=x onerror=alert(1)&gt;.md</a>' in html
    assert ('<a class="citation" href="https://example.com/?a=1&amp;b=&#34;2&#34;" rel="noreferrer" target="_blank">Tides</a>' in html)
    assert "javascript:" not in html and "<img" not in html
