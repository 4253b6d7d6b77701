"""A console page's view function run against a fake API: the loopback answers each path with a
fixed answer and keeps what was asked (tests/unit/runtime/console)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from contract.caller import Principal
from contract.loopback import LoopbackAnswer
from runtime.console.app import Console
from runtime.console.context import ConsoleContext
from runtime.console.page import Page

__all__ = ["Answers", "FakeApi", "render_page"]

Answers = Mapping[str, tuple[int, Any]]
"""By API path (`/v1/models`, without its query): the status and JSON body it answers; any other path is a 404."""


class FakeApi:
    def __init__(self, answers: Answers) -> None:
        self.answers = answers
        self.asked: list[str] = []

    async def __call__(self, method: str, path: str, body: bytes | None, principal: Principal | None,
                       headers: Mapping[str, str] | None = None) -> LoopbackAnswer:
        self.asked.append(f"{method} {path}")
        status, answer = self.answers.get(path.split("?")[0], (404, {"error": {"message": "No such object."}}))
        return LoopbackAnswer(status, {"content-type": "application/json"}, json.dumps(answer).encode())


async def render_page(state_dir: Path, view: Callable[[Page], Awaitable[Response]], path: str, answers: Answers) -> tuple[str, FakeApi]:
    """The HTML alice is shown at `path` (a 200, asserted) and the fake API that answered; the path's
    last segment is the page's `item_id`."""
    api = FakeApi(answers)
    console = Console(ConsoleContext(loopback=api, authenticate=None, state_dir=state_dir))
    session, _ = console.keys.new(Principal("alice", {}))
    request = Request({"type": "http", "method": "GET", "path": path, "query_string": b"", "headers": [],
                       "path_params": {"item_id": path.rstrip("/").rsplit("/", 1)[-1]}})
    response = await view(Page(request, console.views, session))
    body = bytes(response.body).decode()
    assert response.status_code == 200, body
    return body, api
