"""The web console (issue 49) in a real browser: headless Debian chromium driven by Playwright
(pointed at /usr/bin/chromium; Playwright's own browser download is never used), against a
`stack run` server with auth on and the fake upstream behind it. A failing test leaves a
screenshot in its temporary directory."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai
import pytest
from playwright.sync_api import expect

from fake_mcp.servers import TOKEN, McpServers, running_mcp_servers
from fake_upstream import CHAT_MODEL, FakeUpstream, running_fake_upstream
from runtime.testing.targets import StackTarget, open_target
from support.sandbox import runtime_python

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
MODEL = f"fake/{CHAT_MODEL}"
KEYS = {"alice": "sk-alice-0123456789", "bob": "sk-bob-0123456789"}

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian's chromium is not installed (.ci/run installs it)")


@dataclass
class Console:
    target: StackTarget
    browser: Any
    mcp: McpServers
    upstream: FakeUpstream

    @property
    def origin(self) -> str:
        return self.target.base_url.removesuffix("/v1")

    def api(self, who: str = "alice") -> openai.OpenAI:
        return self.target.openai(api_key=KEYS[who], max_retries=0, timeout=30)


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    from playwright.sync_api import sync_playwright

    root = tmp_path_factory.mktemp("console")
    with running_fake_upstream() as upstream, running_mcp_servers() as mcp:
        config = root / "run.yaml"
        config.write_text(f"""name: console
state_dir: {root / 'state'}
recording: {{mode: live}}
providers:
  inference: [{{provider_id: fake, provider_type: openai, config: {{base_url: '{upstream.base_url}', api_key: k}}}}]
  responses: [{{provider_id: builtin, provider_type: builtin}}]
  conversations: [{{provider_id: builtin, provider_type: builtin}}]
  prompts: [{{provider_id: builtin, provider_type: builtin}}]
  files: [{{provider_id: local, provider_type: local}}]
  vector_stores: [{{provider_id: builtin, provider_type: builtin}}]
  sandboxes: [{{provider_id: bubblewrap, provider_type: bubblewrap, config: {{python: '{runtime_python()}'}}}}]
  containers: [{{provider_id: builtin, provider_type: builtin}}]
  tool_runtime: [{{provider_id: mcp, provider_type: mcp, config: {{allow_private: [127.0.0.1]}}}},
                 {{provider_id: file_search, provider_type: file_search}},
                 {{provider_id: code_interpreter, provider_type: code_interpreter}}]
server:
  console: true
  metrics: {{}}
  usage: {{flush_s: 0.2}}
  auth:
    api_keys:
      - {{principal: alice, key: {KEYS['alice']}, attributes: {{roles: [admin]}}}}
      - {{principal: bob, key: {KEYS['bob']}}}
    database_keys: {{cache_s: 0.2}}
    access_policy:
      - permit: {{actions: [read, update, delete]}}
        when: user with admin in roles
""")
        with open_target(f"server:{config}", env={**os.environ, "STACK_RECORDING_MODE": "live"}) as target, sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            try:
                yield Console(target, browser, mcp, upstream)
            finally:
                browser.close()


def snapshot(page: Any, name: str) -> None:
    """With STACK_CONSOLE_SCREENSHOTS set (a folder, e.g. docs/console), the page's picture for the
    docs: made by the tests, so what the docs show is what the console does."""
    folder = os.environ.get("STACK_CONSOLE_SCREENSHOTS")
    if folder:
        page.screenshot(path=str(Path(folder) / f"{name}.png"))


@contextlib.contextmanager
def signed_in(console: Console, tmp_path: Path, who: str = "alice") -> Iterator[Any]:
    """A page signed in as `who`; a screenshot in `tmp_path` if the block fails."""
    context = console.browser.new_context()
    page = context.new_page()
    try:
        page.goto(f"{console.origin}/console/")
        page.fill("input[name=api_key]", KEYS[who])
        page.click("button[type=submit]")
        page.wait_for_selector("#principal")
        yield page
    except BaseException:
        page.screenshot(path=str(tmp_path / "failure.png"), full_page=True)
        raise
    finally:
        context.close()


def test_sign_in_with_a_key_into_a_strict_http_only_cookie(console: Console, tmp_path: Path) -> None:
    context = console.browser.new_context()
    page = context.new_page()
    page.goto(f"{console.origin}/console/responses")
    assert page.url.startswith(f"{console.origin}/console/login")
    page.fill("input[name=api_key]", "sk-wrong-0123456789")
    page.click("button[type=submit]")
    assert page.inner_text("#error") == "That key is not valid here."
    page.fill("input[name=api_key]", KEYS["alice"])
    page.click("button[type=submit]")
    assert page.url == f"{console.origin}/console/responses" and page.inner_text("#principal") == "alice"
    cookie = next(c for c in context.cookies() if c["name"] == "stack_console")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and KEYS["alice"] not in cookie["value"]
    context.close()


def test_a_playground_turn_streams_its_tokens_before_the_answer_ends_and_is_stored(console: Console, tmp_path: Path) -> None:
    with signed_in(console, tmp_path) as page:
        page.goto(f"{console.origin}/console/playground")
        page.select_option("#model", MODEL)
        page.fill("#input", "[tokens:24] [slow:60] Tell me a story")
        page.click("#send")
        # Some of the text is on the page while the stream still runs (its summary comes at its end).
        page.wait_for_function("() => { const a = document.querySelector('#conversation .assistant');"
                               " return a && a.textContent.length > 0 && document.querySelector('#stats').textContent === ''; }")
        page.wait_for_function("() => document.querySelector('#stats').textContent.startsWith('completed')")
        answer = page.inner_text("#conversation .assistant")
        assert len(answer.split()) >= 20
        snapshot(page, "playground")
        page.click("#stats a")
        assert page.inner_text("#status") == "completed"
        assert page.inner_text(".output .text") == answer
        snapshot(page, "response")


def test_an_mcp_call_waits_for_its_approval_which_a_click_gives(console: Console, tmp_path: Path) -> None:
    tool = json.dumps([{"type": "mcp", "server_label": "demo", "server_url": console.mcp.open, "require_approval": "always"}])
    with signed_in(console, tmp_path) as page:
        page.goto(f"{console.origin}/console/playground")
        page.select_option("#model", MODEL)
        page.click("details summary")
        page.fill("#tools", tool)
        page.fill("#input", '[tool:weather {"city": "Oslo"}]')
        page.click("#send")
        page.wait_for_selector(".approval button.approve")
        assert "demo.weather" in page.inner_text(".approval")
        snapshot(page, "approval")
        page.click(".approval button.approve >> text=Approve")
        page.wait_for_selector("#conversation .tool")
        page.wait_for_function("() => document.querySelector('#stats').textContent.startsWith('completed')")
        assert '"temp_c": 21.5' in page.inner_text("#conversation .tool").replace('"temp_c":21.5', '"temp_c": 21.5')
        assert "Tool result:" in page.locator("#conversation .assistant").last.inner_text()


COMPLETED = "() => document.querySelector('#stats').textContent.startsWith('completed')"
PARAMETERS = {"type": "object", "properties": {"order": {"type": "string"}}, "required": ["order"], "additionalProperties": False}


def open_tools(page: Any, console: Console) -> None:
    page.goto(f"{console.origin}/console/playground")
    page.select_option("#model", MODEL)
    page.click("#tools-panel summary")


def test_a_function_tool_built_with_the_form_reaches_the_model(console: Console, tmp_path: Path) -> None:
    ask = '[tool:lookup_order {"order": "A1"}]'
    with signed_in(console, tmp_path) as page:
        open_tools(page, console)
        page.click("#add-function")
        page.fill("#functions .tool-name", "lookup_order")
        page.fill("#functions .tool-description", "Finds an order by its number")
        page.fill("#functions .tool-parameters", '{"type": "object", "properties": ')
        assert "The parameters are not valid JSON" in page.inner_text("#functions .tool-error")  # said as it is typed
        page.fill("#input", ask)
        page.click("#send")
        assert page.inner_text("#stats").startswith("Tools: function lookup_order: its parameters are not valid JSON")
        assert page.input_value("#input") == ask and page.locator("#conversation .turn").count() == 0  # nothing sent, nothing lost
        page.fill("#functions .tool-parameters", "[]")
        assert "not a JSON object" in page.inner_text("#functions .tool-error")
        page.fill("#functions .tool-parameters", json.dumps(PARAMETERS))
        assert page.inner_text("#functions .tool-error") == ""
        page.check("#functions .tool-strict")
        page.locator("#tools-panel").evaluate("panel => panel.scrollIntoView()")
        snapshot(page, "tools")
        page.click("#add-function")  # a second one, removed again
        page.locator("#functions .function-tool").nth(1).locator(".remove-tool").click()
        assert page.locator("#functions .function-tool").count() == 1
        page.click("#show-code")
        assert page.inner_text("#stats") == ""  # the mistake put right, its message gone
        code = page.inner_text("#code")  # the SDK's call and curl's body both carry the tool
        assert '"name":"lookup_order"' in code and '"strict":True' in code  # the SDK's keyword arguments
        assert '"name": "lookup_order"' in code and '"strict": true' in code  # curl's JSON
        asked = len(console.upstream.requests)
        page.click("#send")
        page.wait_for_selector("#conversation .call")
        assert page.inner_text("#conversation .call").startswith('lookup_order({"order": "A1"})')
    [sent] = [r.body for r in console.upstream.requests[asked:] if r.path.endswith("/chat/completions")]
    assert sent["tools"] == [{"type": "function", "function": {"name": "lookup_order", "description": "Finds an order by its number",
                                                               "parameters": PARAMETERS, "strict": True}}]


def test_an_mcp_server_built_with_the_form_gets_its_token_which_the_console_keeps_nowhere(console: Console, tmp_path: Path) -> None:
    with signed_in(console, tmp_path) as page:
        open_tools(page, console)
        page.click("#add-mcp")
        page.fill("#mcps .mcp-label", "vault")
        page.fill("#mcps .mcp-url", console.mcp.private)  # 401 without the token
        page.select_option("#mcps .mcp-approval", "never")
        page.fill("#mcps .mcp-allowed", "weather, echo")
        page.fill("#mcps .mcp-authorization", TOKEN)
        page.fill("#input", '[tool:weather {"city": "Oslo"}]')
        page.click("#show-code")
        code = page.inner_text("#code")
        assert TOKEN not in code and '"authorization": "..."' in code and '"allowed_tools": [\n' in code
        page.click("#send")
        page.wait_for_function(COMPLETED)
        assert "21.5" in page.inner_text("#conversation .tool")
        page.click("#stats a")
        assert "vault" in page.inner_text("main") and TOKEN not in page.content()


def test_a_file_search_tool_from_the_store_select_cites_its_files_as_links(console: Console, tmp_path: Path) -> None:
    with console.api() as client:
        upload = client.files.create(file=("keeper.md", io.BytesIO(b"In fog the keeper sounds the horn twice a minute.")),
                                     purpose="assistants")
        store = client.vector_stores.create(name="keeping", file_ids=[upload.id])
        deadline = time.monotonic() + 20
        while client.vector_stores.retrieve(store.id).status == "in_progress" and time.monotonic() < deadline:
            time.sleep(0.05)
    ask = '[tool:file_search {"queries": ["fog horn"]}] [answer {"text": "In fog the keeper sounds the horn [1]."}]'
    with signed_in(console, tmp_path) as page:
        open_tools(page, console)
        assert page.locator("#web-search").count() == 0 and "No web search backend" in page.inner_text("#no-web-search")
        page.select_option("#file-search-stores", store.id)
        page.fill("#file-search-max", "3")
        page.fill("#input", ask)
        page.click("#send")
        page.wait_for_function(COMPLETED)
        assert "file_search_call" in page.inner_text("#conversation .tool")
        cited = page.locator("#conversation a.citation")
        assert cited.inner_text() == "keeper.md" and cited.get_attribute("href") == f"/console/files/{upload.id}"
        response_id = page.get_attribute("#conversation .assistant", "data-response-id")
        page.click("#stats a")
        cited = page.locator(".output a.citation")
        assert cited.inner_text() == "keeper.md" and cited.get_attribute("href") == f"/console/files/{upload.id}"
        cited.click()
        assert page.inner_text("h1") == "File keeper.md"
    with console.api() as client:
        [tool] = client.responses.retrieve(response_id).tools  # type: ignore[arg-type]
    assert tool.type == "file_search" and tool.vector_store_ids == [store.id] and tool.max_num_results == 3


def test_the_code_interpreter_form_runs_python_and_shows_its_logs_and_figure(console: Console, tmp_path: Path) -> None:
    code = "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nprint('plotted')"
    ask = f"[tool:python {json.dumps({'code': code})}] " + '[answer {"text": "Here it is."}]'
    with signed_in(console, tmp_path) as page:
        open_tools(page, console)
        page.check("#code-interpreter-on")
        page.select_option("#code-interpreter-memory", "1g")
        page.fill("#input", ask)
        page.click("#send")
        page.wait_for_function(COMPLETED)
        tool = page.locator("#conversation .tool")
        assert tool.inner_text().startswith("python: import matplotlib") and tool.locator("pre.logs").inner_text() == "plotted\n"
        assert tool.locator("img.plot").evaluate("image => image.naturalWidth") > 0  # the PNG drew
        tool.locator("img.plot").scroll_into_view_if_needed()
        snapshot(page, "playground-code-interpreter")


def test_a_file_the_code_wrote_is_cited_as_its_download_for_its_owner_only(console: Console, tmp_path: Path) -> None:
    code = "open('/mnt/data/tally.txt', 'w').write('42 sheep')"
    ask = f"[tool:python {json.dumps({'code': code})}] " + '[answer {"text": "Counted: sandbox:/mnt/data/tally.txt"}]'
    with console.api() as client:
        response = client.responses.create(model="fake-model", input=ask, tools=[{"type": "code_interpreter", "container": "auto"}])
    with signed_in(console, tmp_path) as page:
        page.goto(f"{console.origin}/console/responses/{response.id}")
        cited = page.locator(".output a.citation")
        href = cited.get_attribute("href") or ""
        assert cited.inner_text() == "tally.txt" and href.startswith("/console/containers/cntr_") and href.endswith("/content")
        download = page.request.get(f"{console.origin}{href}")
        assert download.status == 200 and download.body() == b"42 sheep"
    with signed_in(console, tmp_path, "bob") as page:
        assert page.request.get(f"{console.origin}{href}").status == 404  # another principal's container


PIXEL = bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010806000000"
                      "1f15c4890000000d49444154789c63f8cfc0f01f0005000201e2a5c1e50000000049454e44ae426082")


def test_a_background_responses_events_are_followed_as_they_come(console: Console, tmp_path: Path) -> None:
    with console.api() as client:
        running = client.responses.create(model=MODEL, input="[tokens:60] [slow:100] a long answer", background=True, stream=False)
    with signed_in(console, tmp_path) as page:
        page.goto(f"{console.origin}/console/responses/{running.id}")
        page.click("text=the stream's events")
        page.wait_for_selector("#events tr:has-text('response.output_text.delta')")
        assert page.locator("#events tr:has-text('response.completed')").count() == 0  # followed while it still runs
        page.wait_for_selector("#events tr:has-text('response.completed')", timeout=20_000)
        assert page.inner_text("#status") == "completed"
        rows = page.locator("#events tr").count()
        assert rows > 60


def test_an_image_goes_with_a_playground_turn(console: Console, tmp_path: Path) -> None:
    image = tmp_path / "pixel.png"
    image.write_bytes(PIXEL)
    with signed_in(console, tmp_path) as page:
        page.goto(f"{console.origin}/console/playground")
        page.select_option("#model", MODEL)
        page.fill("#input", "What is in this picture?")
        page.set_input_files("#attachment", str(image))
        page.click("#send")
        page.wait_for_function("() => document.querySelector('#stats').textContent.startsWith('completed')")
        response_id = page.get_attribute("#conversation .assistant", "data-response-id")
    with console.api() as client:
        [item] = client.responses.input_items.list(response_id).data  # type: ignore[arg-type]
    parts = [part.type for part in item.content]  # type: ignore[union-attr]
    assert parts == ["input_text", "input_image"] and item.content[1].image_url.startswith("data:image/png;base64,")  # type: ignore[union-attr]


def test_whatever_a_user_stored_shows_as_text_never_as_markup(console: Console, tmp_path: Path) -> None:
    with console.api() as client:
        stored = client.responses.create(model=MODEL, input="<script>window.pwned = 1</script><img src=x onerror='window.pwned=2'>")
    with signed_in(console, tmp_path) as page:
        response = page.goto(f"{console.origin}/console/responses/{stored.id}")
        assert "script-src 'self'" in response.headers["content-security-policy"]
        assert "<script>window.pwned = 1</script>" in page.inner_text("main")
        assert page.evaluate("() => window.pwned === undefined")


def test_the_operator_makes_a_key_shown_once_and_revokes_it(console: Console, tmp_path: Path) -> None:
    with signed_in(console, tmp_path) as page:
        page.click("#operate")
        page.wait_for_load_state()  # the whole page: under load its text was once read while it was still coming
        assert "stack_requests_total" in page.inner_text("main")  # the server's own counts
        assert "/v1/models" in page.inner_text("#latency") and "ms" in page.inner_text("#latency")
        page.fill("#new-key-form input[name=principal]", "carol")
        page.click("#new-key-form button")
        key = page.inner_text("#new-key")
        page.reload()
        assert key not in page.content()  # shown once
        snapshot(page, "operate")  # (after the reload: no key in the docs' picture)
        with console.target.openai(api_key=key, max_retries=0) as carol:
            assert carol.models.list().data
        page.click("#keys tr:has-text('carol') button")
        page.wait_for_timeout(300)  # past the server's key cache (cache_s: 0.2)
        with console.target.openai(api_key=key, max_retries=0) as carol, pytest.raises(openai.AuthenticationError):
            carol.models.list()
    with signed_in(console, tmp_path, "bob") as page:
        assert page.locator("#operate").count() == 0
        page.goto(f"{console.origin}/console/operate")
        assert page.inner_text("#error") == "No such page."


def test_usage_charts_per_model_and_principal_and_the_live_view(console: Console, tmp_path: Path) -> None:
    with console.api("bob") as bob:
        for _ in range(3):
            bob.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "count me"}])
    with signed_in(console, tmp_path, "bob") as page:  # not an operator: its own usage only, by model
        page.click("text=Usage")
        page.select_option("select[name=range]", "1h")
        page.click("form.filters button")
        totals = page.inner_text("#usage-totals")
        assert MODEL in totals and page.locator("select[name=by]").count() == 0
        assert page.locator("#chart-requests rect").count() >= 1 and page.locator("#chart-tokens rect").count() >= 1
        page.goto(f"{console.origin}/console/usage?range=1h&by=principal")  # asked for anyway: still by model, its own
        assert "alice" not in page.inner_text("#usage-totals")
    with signed_in(console, tmp_path) as page:
        page.goto(f"{console.origin}/console/usage?range=1h&by=principal")
        rows = page.inner_text("#usage-totals")
        assert "bob" in rows and "alice" in rows
        snapshot(page, "usage")
        page.click("#operate")
        rate = page.locator("#live-rate")
        expect(rate).not_to_have_text("–", timeout=10_000)  # a second sample: a rate (the page's script may not eval a string)
        with console.api("alice") as alice:
            for _ in range(50):
                alice.models.list()
                if float(rate.inner_text()) > 0:
                    break
                page.wait_for_timeout(200)
        assert float(rate.inner_text()) > 0 and page.locator("#live-chart polyline").count() == 1
        assert page.inner_text("#live-p50").endswith("ms")


def test_another_principal_sees_none_of_it(console: Console, tmp_path: Path) -> None:
    with console.api("alice") as client:
        stored = client.responses.create(model=MODEL, input="alice's secret")
        upload = client.files.create(file=("alice.txt", io.BytesIO(b"private")), purpose="user_data")
    with signed_in(console, tmp_path, "bob") as page:
        page.goto(f"{console.origin}/console/responses/{stored.id}")
        assert "not found" in page.inner_text("#error").lower() or "no response" in page.inner_text("#error").lower()
        page.goto(f"{console.origin}/console/responses")
        assert stored.id not in page.content()
        page.goto(f"{console.origin}/console/files")
        assert upload.id not in page.content()


def test_conversations_prompts_and_a_stores_files_are_browsed_and_changed(console: Console, tmp_path: Path) -> None:
    with console.api() as client:
        conversation = client.conversations.create(items=[{"type": "message", "role": "user", "content": "Remember the blue door."}])
        client.responses.create(model=MODEL, input="And the red one?", conversation=conversation.id)
        prompt = client.post("/prompts", body={"prompt": "Hello {{name}}", "variables": ["name"]}, cast_to=object)
        client.post(f"/prompts/{prompt['prompt_id']}", body={"prompt": "Hi {{name}}!", "variables": ["name"], "version": 1},  # type: ignore[index]
                    cast_to=object)
        first = client.files.create(file=("a.txt", io.BytesIO(b"apples and pears")), purpose="user_data")
        store = client.vector_stores.create(name="fruit")
    with signed_in(console, tmp_path) as page:
        page.goto(f"{console.origin}/console/conversations")
        page.fill("#open-conversation input", conversation.id)
        page.click("#open-conversation button")
        text = page.inner_text("main")
        assert "Remember the blue door." in text and "And the red one?" in text
        page.goto(f"{console.origin}/console/prompts")
        page.click(f"text={prompt['prompt_id']}")  # type: ignore[index]
        versions = page.inner_text("table.versions")
        assert "Hello {{name}}" in versions and "Hi {{name}}!" in versions
        page.goto(f"{console.origin}/console/conversations/{conversation.id}")
        page.click("#continue")
        page.select_option("#model", MODEL)
        page.fill("#input", "And the green one?")
        page.click("#send")
        page.wait_for_function("() => document.querySelector('#stats').textContent.startsWith('completed')")
        page.goto(f"{console.origin}/console/conversations/{conversation.id}")
        assert "And the green one?" in page.inner_text("main")  # the turn went into the conversation
        page.goto(f"{console.origin}/console/vector_stores")
        page.fill("#new-store input[name=name]", "made here")
        page.click("#new-store button")
        assert page.inner_text("h1") == "Vector store made here"
        page.goto(f"{console.origin}/console/vector_stores/{store.id}")
        page.fill("#attach input[name=file_id]", first.id)
        page.click("#attach button")
        assert first.id in page.inner_text("#store-files")
        page.click("#store-files button")
        assert first.id not in page.inner_text("#store-files")


def test_lists_filter_as_the_api_does(console: Console, tmp_path: Path) -> None:
    with console.api() as client:
        batch_input = client.files.create(file=("in.jsonl", io.BytesIO(b"{}")), purpose="batch")
        notes = client.files.create(file=("notes.txt", io.BytesIO(b"notes")), purpose="user_data")
    with signed_in(console, tmp_path) as page:
        page.goto(f"{console.origin}/console/files")
        page.select_option("#filters select[name=purpose]", "batch")
        page.click("#filters button")
        listed = page.inner_text("table.list")
        assert batch_input.id in listed and notes.id not in listed and "purpose=batch" in page.url
        page.select_option("#filters select[name=order]", "asc")
        page.click("#filters button")
        assert page.locator("#filters select[name=order]").input_value() == "asc"


def test_a_form_without_its_csrf_token_is_refused(console: Console, tmp_path: Path) -> None:
    with console.api() as client:
        upload = client.files.create(file=("keep.txt", io.BytesIO(b"keep me")), purpose="user_data")
    with signed_in(console, tmp_path) as page:
        refused = page.request.post(f"{console.origin}/console/files/{upload.id}/delete", form={"csrf": "forged"})
        assert refused.status == 403
        with console.api() as client:
            assert client.files.retrieve(upload.id).id == upload.id  # still there


def test_upload_a_file_put_it_in_a_vector_store_and_search_it(console: Console, tmp_path: Path) -> None:
    source = tmp_path / "guide.txt"
    source.write_text("The lighthouse keeper winds the clock every evening at dusk.")
    with signed_in(console, tmp_path) as page:
        page.goto(f"{console.origin}/console/files")
        page.set_input_files("#upload input[type=file]", str(source))
        page.click("#upload button")
        page.wait_for_selector("text=guide.txt")
        file_id = page.inner_text("table.list tr:nth-child(2) td:first-child")
        with console.api() as client:
            store = client.vector_stores.create(name="guides", file_ids=[file_id])
            for _ in range(100):
                if client.vector_stores.retrieve(store.id).file_counts.in_progress == 0:
                    break
                page.wait_for_timeout(50)
        page.goto(f"{console.origin}/console/vector_stores/{store.id}")
        page.fill("#search input[name=query]", "lighthouse keeper")
        page.click("#search button")
        assert "lighthouse keeper" in page.inner_text("#hits")
        snapshot(page, "vector-store")
