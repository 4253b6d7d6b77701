"""Error handling of the app: every failure is an OpenAI-shaped body with the right status."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from fastapi import FastAPI, Request
from pydantic import BaseModel
from starlette.datastructures import State
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp

from runtime.app.stack_app import StackApp
from runtime.http.errors import install_error_handlers
from runtime.transports.asgi import BackgroundLoop, ThreadedASGITransport
from contract.errors import NotFoundError, UpstreamError
from runtime.http.middleware import Draining, RequestGuard


class Body(BaseModel):
    model: str
    temperature: float = 1.0


def build_app(draining: Draining | None = None, more: Callable[[FastAPI], None] | None = None,
              allowed_origins: frozenset[str] = frozenset()) -> ASGIApp:
    """FastAPI (with the routes `more` adds) behind the stack's RequestGuard, as runtime.app.stack_app puts them together."""
    app = FastAPI()
    if more is not None:
        more(app)

    @app.post("/v1/things")
    async def create(body: Body) -> dict[str, str]:
        return {"model": body.model}

    @app.get("/v1/things/{thing_id}")
    async def get(thing_id: str) -> dict[str, str]:
        raise NotFoundError(f"No thing with id '{thing_id}'.", param="thing_id")

    @app.get("/v1/upstream")
    async def upstream() -> dict[str, str]:
        raise UpstreamError("rate limited upstream", status_code=429, error_type="rate_limit_error", headers={"retry-after": "3"})

    @app.get("/v1/bug")
    async def bug() -> dict[str, str]:
        raise KeyError("oops")

    install_error_handlers(app)
    return RequestGuard(app, max_body_bytes=1024, draining=draining, allowed_origins=allowed_origins)


@pytest.fixture
def client() -> Iterator[httpx2.Client]:
    with BackgroundLoop() as loop:
        with httpx2.Client(transport=ThreadedASGITransport(build_app(), loop), base_url="http://app") as client:
            yield client


def test_a_missing_field_is_a_400_naming_the_parameter(client: httpx2.Client) -> None:
    response = client.post("/v1/things", json={})
    assert response.status_code == 400
    assert response.json() == {"error": {
        "message": "Missing required parameter: 'model'.",
        "type": "invalid_request_error",
        "param": "model",
        "code": "missing_required_parameter",
    }}


def test_a_wrong_type_is_a_400_naming_the_parameter_and_value(client: httpx2.Client) -> None:
    error = client.post("/v1/things", json={"model": "m", "temperature": "hot"}).json()["error"]
    assert error["param"] == "temperature"
    assert error["code"] == "invalid_value"
    assert "'hot'" in error["message"]


def test_malformed_json_is_a_400(client: httpx2.Client) -> None:
    response = client.post("/v1/things", content=b"{not json", headers={"content-type": "application/json"})
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_json"


def test_our_errors_keep_their_status_param_and_headers(client: httpx2.Client) -> None:
    response = client.get("/v1/things/abc")
    assert response.status_code == 404
    assert response.json()["error"] == {"message": "No thing with id 'abc'.", "type": "invalid_request_error", "param": "thing_id", "code": None}
    limited = client.get("/v1/upstream")
    assert limited.status_code == 429
    assert limited.headers["retry-after"] == "3"
    assert limited.json()["error"]["type"] == "rate_limit_error"


def test_a_bug_is_a_500_with_the_request_id_and_no_trace(client: httpx2.Client, caplog: pytest.LogCaptureFixture) -> None:
    response = client.get("/v1/bug")
    assert response.status_code == 500
    request_id = response.headers["x-request-id"]
    error = response.json()["error"]
    assert error["type"] == "server_error"
    assert request_id in error["message"]
    assert "KeyError" not in response.text and "Traceback" not in response.text
    assert any(request_id in record.getMessage() for record in caplog.records)


def test_a_declared_oversized_body_is_refused_before_the_app_reads_it(client: httpx2.Client) -> None:
    response = client.post("/v1/things", json={"model": "x" * 2000})
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "request_too_large"


def test_a_streamed_oversized_body_is_refused_while_it_is_read(client: httpx2.Client) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"model": "'
        yield b"x" * 2000
        yield b'"}'

    response = client.post("/v1/things", content=chunks(), headers={"content-type": "application/json"})
    assert response.status_code == 413


@pytest.mark.parametrize("headers", [
    {"content-type": "text/plain"}, {"content-type": "application/x-www-form-urlencoded"}, {"content-type": "application/jsonp"},
    {"content-type": "text/json"}, {},
], ids=lambda headers: headers.get("content-type", "none"))
def test_a_body_not_declared_json_or_a_form_is_a_415_before_the_app_reads_it(headers: dict[str, str]) -> None:
    calls: list[str] = []

    def more(app: FastAPI) -> None:
        @app.post("/v1/raw")
        async def raw(request: Request) -> dict[str, str]:
            calls.append((await request.body()).decode())
            return {}

    with BackgroundLoop() as loop, httpx2.Client(transport=ThreadedASGITransport(build_app(more=more), loop), base_url="http://app") as client:
        for content in (b'{"model": "m"}', iter([b'{"model": ', b'"m"}'])):  # declared length, then chunks
            response = client.post("/v1/raw", content=content, headers=headers)
            assert response.status_code == 415, response.text
            assert response.json()["error"]["code"] == "unsupported_content_type"
            assert response.headers["x-request-id"]
    assert calls == []


@pytest.mark.parametrize("content_type", ["application/json", "application/json; charset=utf-8", "APPLICATION/JSON",
                                          "application/merge-patch+json"])
def test_json_in_any_of_its_forms_is_read(client: httpx2.Client, content_type: str) -> None:
    assert client.post("/v1/things", content=b'{"model": "m"}', headers={"content-type": content_type}).json() == {"model": "m"}


@pytest.mark.parametrize("headers", [{}, {"authorization": "Bearer none"}, {"origin": "http://app", "sec-fetch-site": "same-origin"},
                                     {"origin": "https://evil.example", "sec-fetch-site": "cross-site", "authorization": "Bearer k"}])
def test_a_multipart_form_from_a_program_or_a_same_origin_page_and_a_request_without_a_body_pass(client: httpx2.Client,
                                                                                                 headers: dict[str, str]) -> None:
    # A program (llama-stack-client with no key sends no Authorization) or the server's own page.
    form = client.post("/v1/things", files={"file": ("a.txt", b"x")}, headers=headers)
    assert form.status_code == 400 and form.json()["error"]["code"] != "unsupported_content_type"  # let through: the route says what it takes
    assert client.get("/v1/things/abc", headers={"content-type": "text/plain"}).status_code == 404


@pytest.mark.parametrize("headers", [{"origin": "https://evil.example", "sec-fetch-site": "cross-site"},
                                     {"origin": "http://localhost:3000", "sec-fetch-site": "same-site"}, {"origin": "https://evil.example"}])
def test_a_multipart_form_from_a_browser_page_of_another_origin_is_a_415(client: httpx2.Client, headers: dict[str, str]) -> None:
    # What a page of another site can make a browser send (no preflight), with what the browser adds.
    refused = client.post("/v1/things", files={"file": ("a.txt", b"x")}, headers=headers)
    assert refused.status_code == 415 and refused.json()["error"]["code"] == "unsupported_content_type"
    assert "from a browser page of another origin" in refused.json()["error"]["message"]


def test_a_multipart_form_from_an_origin_the_cors_config_allows_passes() -> None:
    app = build_app(allowed_origins=frozenset({"https://app.example.com"}))
    with BackgroundLoop() as loop, httpx2.Client(transport=ThreadedASGITransport(app, loop), base_url="http://app") as client:
        browser = {"sec-fetch-site": "cross-site"}
        allowed = client.post("/v1/things", files={"file": ("a.txt", b"x")}, headers={**browser, "origin": "https://app.example.com"})
        refused = client.post("/v1/things", files={"file": ("a.txt", b"x")}, headers={**browser, "origin": "https://evil.example"})
    assert allowed.json()["error"]["code"] != "unsupported_content_type" and refused.status_code == 415


def test_requests_that_arrive_during_a_shutdown_are_a_503_in_openais_shape() -> None:
    draining = Draining()
    with BackgroundLoop() as loop, httpx2.Client(transport=ThreadedASGITransport(build_app(draining), loop), base_url="http://app") as client:
        assert client.post("/v1/things", json={"model": "m"}).status_code == 200
        draining.started = True
        refused = client.post("/v1/things", json={"model": "m"})
    assert refused.status_code == 503 and refused.headers["connection"] == "close"
    assert refused.json() == {"error": {"message": refused.json()["error"]["message"], "type": "server_error", "param": None,
                                        "code": "server_shutting_down"}}
    assert "shutting down" in refused.json()["error"]["message"]


def chat_only(tmp_path: Path) -> Path:
    """A run.yaml serving inference alone, over an upstream that is not there."""
    run_yaml = tmp_path / "run.yaml"
    run_yaml.write_text("version: 1\nname: chat-only\nproviders:\n  inference:\n    - provider_id: up\n      provider_type: openai\n"
                        "      config: {base_url: 'http://127.0.0.1:9/v1', api_key: k}\n"
                        f"state_dir: {tmp_path / 'state'}\n")
    return run_yaml


def test_a_stack_imports_the_routes_of_the_apis_it_serves_and_not_the_others(tmp_path: Path) -> None:
    # What a config does not use is not imported: start-up time and memory (issue 19).
    run_yaml = chat_only(tmp_path)
    code = f"""
import asyncio, os, sys
from builder.resolve import load_plan
from runtime.app.stack_app import create_app
from runtime.stack import open_stack

async def main():
    async with open_stack(load_plan({str(run_yaml)!r}, os.environ)) as stack:
        create_app(stack)
asyncio.run(main())
loaded = sorted(name for name in sys.modules if name.startswith("runtime.apis.") and name.endswith(".routes"))
assert loaded == ["runtime.apis.inference.routes"], loaded
"""
    result = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[3], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr[-2000:]


def test_fastapi_is_imported_only_when_a_request_needs_it(tmp_path: Path) -> None:
    # Start-up time and memory (issue 19): importing FastAPI and building its routes is a third of
    # the start-up. The direct routes (chat, models, health...) never need it; the first request
    # they leave to FastAPI (here an unknown route) builds it, and is answered as before.
    run_yaml = chat_only(tmp_path)
    code = f"""
import sys
from runtime.library_client import LibraryClient

with LibraryClient({str(run_yaml)!r}) as stack, stack.http_client() as http:
    assert http.get("health").json()["status"] in ("ok", "degraded")
    models = http.get("models")
    assert models.json()["object"] == "list", models.text
    assert http.get("version").status_code == 200
    # An API not served, and a path ending in a slash, are answered before FastAPI too (issue 44).
    moderation = http.post("moderations", json={{"input": "x"}})
    assert moderation.status_code == 404 and moderation.json()["error"]["code"] == "api_not_configured", moderation.text
    assert http.get("models/").status_code == 404 and http.post("chat/completions/", json={{}}).status_code == 404
    assert "fastapi" not in sys.modules, sorted(name for name in sys.modules if name.startswith("fastapi"))
    unknown = http.get("no/such/route")
    assert unknown.status_code == 404 and unknown.json()["error"]["message"] == "Unknown route: GET /v1/no/such/route", unknown.text
    assert "fastapi" in sys.modules
    wrong = http.delete("models")
    assert wrong.status_code == 405 and wrong.headers["allow"] == "GET", wrong.text
    assert "/v1/chat/completions" in http.get("http://stack.local/openapi.json").json()["paths"]
    assert http.get("health").status_code == 200
"""
    result = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[3], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr[-2000:]


async def _get(app: ASGIApp, path: str) -> tuple[int, bytes]:
    """One GET through an ASGI app: its status and body."""
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET", "scheme": "http", "path": path,
             "raw_path": path.encode(), "root_path": "", "query_string": b"", "headers": [], "server": ("test", 80), "client": ("c", 1)}
    await app(scope, receive, send)
    return sent[0]["status"], b"".join(message.get("body", b"") for message in sent[1:])


def _lazy_app(build: Callable[[], FastAPI]) -> StackApp:
    """A StackApp whose stand-in for the direct routes answers /fast itself and leaves the rest to FastAPI."""
    app = StackApp(State(), build)

    async def direct(scope: Any, receive: Any, send: Any) -> None:
        if scope["path"] == "/fast":
            await PlainTextResponse("direct")(scope, receive, send)
        else:
            await app.routed(scope, receive, send)

    app.middleware_stack = direct
    return app


def _routed_app() -> FastAPI:
    app = FastAPI()

    @app.get("/slow")
    async def slow() -> dict[str, bool]:
        return {"routed": True}

    return app


async def test_while_fastapi_is_built_the_direct_routes_go_on_answering() -> None:
    # The build (importing FastAPI, 0.1 to 0.25 s) runs on a thread, not on the event loop.
    release, builds = threading.Event(), []

    def build() -> FastAPI:
        builds.append(threading.current_thread().name)
        assert release.wait(10)
        return _routed_app()

    app = _lazy_app(build)
    first, second = asyncio.create_task(_get(app, "/slow")), asyncio.create_task(_get(app, "/slow"))
    assert await asyncio.wait_for(_get(app, "/fast"), 5) == (200, b"direct")
    assert not first.done() and not second.done()
    release.set()
    assert await asyncio.wait_for(asyncio.gather(first, second), 10) == [(200, b'{"routed":true}')] * 2
    assert len(builds) == 1 and builds[0] != threading.current_thread().name
    assert await _get(app, "/slow") == (200, b'{"routed":true}')


async def test_a_build_that_failed_is_tried_again_by_the_next_request() -> None:
    attempts: list[int] = []

    def build() -> FastAPI:
        attempts.append(1)
        if len(attempts) == 1:
            raise RuntimeError("no room to import")
        return _routed_app()

    app = _lazy_app(build)
    with pytest.raises(RuntimeError, match="no room"):
        await _get(app, "/slow")
    assert await _get(app, "/slow") == (200, b'{"routed":true}')
    assert len(attempts) == 2
