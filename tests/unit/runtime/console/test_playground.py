"""The playground's tool forms offer what the server can run (read from /v1/providers) and the
principal's own vector stores, and its page renders them escaped."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from runtime.console.playground import WEB_SEARCH_BACKENDS, ToolOptions, playground, tool_options
from support.console_pages import render_page

ROOT = Path(__file__).resolve().parents[4]


def provider(kind: str, status: str = "active", **config: Any) -> dict[str, Any]:
    return {"api": "tool_runtime", "provider_id": kind, "provider_type": kind, "status": status, "config": config}


PROVIDERS = {"object": "list", "data": [
    {"api": "inference", "provider_id": "fake", "provider_type": "openai", "status": "active", "config": {}},
    provider("mcp", servers=[{"server_label": "docs", "server_url": "https://docs.example/mcp", "authorization": "********"},
                             {"server_label": "drive", "server_url": "https://drive.example/mcp", "connector_id": "connector_googledrive"}]),
    provider("file_search"), provider("code_interpreter"),
]}
STORES = {"object": "list", "data": [{"id": "vs_1", "name": "coast"}, {"id": "vs_2", "name": None}, {"name": "no id"}]}


def test_the_forms_offer_the_tool_runtimes_the_server_runs_and_its_mcp_servers() -> None:
    assert tool_options(PROVIDERS, STORES) == ToolOptions(
        known=True, mcp=True, file_search=True, web_search=False, code_interpreter=True, servers=("docs", "drive"),
        connectors=("connector_googledrive",),
        stores=(("vs_1", "coast (vs_1)"), ("vs_2", "unnamed (vs_2)")))


def test_web_search_is_offered_when_a_backend_is_active() -> None:
    assert tool_options({"data": [provider("searxng", base_url="http://127.0.0.1:8888")]}, None).web_search
    assert not tool_options({"data": [provider("searxng", status="inactive")]}, None).web_search
    assert not tool_options({"data": [provider("mcp")]}, None).file_search
    assert not tool_options({"data": [provider("mcp")]}, None).code_interpreter


def test_providers_that_cannot_be_read_offer_every_form() -> None:
    for answer in (None, {"error": {"message": "no"}}, "junk"):
        options = tool_options(answer, None)
        assert not options.known and options.mcp and options.file_search and options.web_search and options.code_interpreter
        assert options.stores == ()


def test_the_web_search_backends_are_the_web_search_entry_points() -> None:
    points = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]["stack.providers.tool_runtime"]
    assert {name for name, target in points.items() if target.startswith("providers.tool_runtime.web_search")} == WEB_SEARCH_BACKENDS


async def test_the_page_lists_the_principals_stores_escaped_and_no_form_for_what_is_not_served(tmp_path: Path) -> None:
    stores = {"data": [{"id": "vs_1", "name": "<b>coast</b>"}]}
    answers = {"/v1/models": (200, {"data": [{"id": "m"}]}), "/v1/providers": (200, PROVIDERS), "/v1/vector_stores": (200, stores)}
    html, api = await render_page(tmp_path, playground, "/console/playground", answers)
    assert "GET /v1/vector_stores?limit=100" in api.asked
    assert '<option value="vs_1">&lt;b&gt;coast&lt;/b&gt; (vs_1)</option>' in html
    assert 'id="add-function"' in html and 'id="add-mcp"' in html and '<option value="connector_googledrive">' in html
    assert 'id="web-search"' not in html and 'id="no-web-search"' in html and 'id="tools-unknown"' not in html
    assert "********" not in html


async def test_a_refused_provider_list_offers_every_form_with_a_note(tmp_path: Path) -> None:
    answers = {"/v1/models": (200, {"data": []}), "/v1/providers": (403, {"error": {"message": "no"}})}
    html, _ = await render_page(tmp_path, playground, "/console/playground", answers)
    assert 'id="tools-unknown"' in html and 'id="web-search"' in html and 'id="add-mcp"' in html
    assert "You have no vector stores yet" in html
