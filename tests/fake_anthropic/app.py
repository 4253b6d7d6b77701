"""The fake Anthropic upstream as a Starlette app: POST /v1/messages (streamed or not), POST
/v1/messages/count_tokens and GET
/v1/models (paginated, two models a page whatever `limit` asks, so clients must follow pages)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from fake_anthropic.answers import plan_message, render_events, render_message
from fake_anthropic.checks import MODELS, WireError, check_request

PAGE_SIZE = 2
CREATED_AT = "2025-02-19T00:00:00Z"


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """A request the fake received: its method, path (with its query), JSON body and headers, and
    the body's bytes as they came."""

    method: str
    path: str
    body: Any
    headers: dict[str, str]
    raw: bytes = b""


def _error(error: WireError) -> Response:
    return Response(json.dumps(error.body()), error.status, error.headers or None, "application/json")


class FakeAnthropicApp:
    def __init__(self, api_key: str | None, recorded: list[RecordedRequest]) -> None:
        self.api_key = api_key
        self.recorded = recorded

    def _admit(self, request: Request, raw: bytes | None) -> Any:
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode(errors="replace") if raw else None
        query = f"?{request.url.query}" if request.url.query else ""
        self.recorded.append(RecordedRequest(request.method, request.url.path + query, body, dict(request.headers), raw or b""))
        if self.api_key is not None and request.headers.get("x-api-key") != self.api_key:
            raise WireError(401, "invalid x-api-key")
        if not request.headers.get("anthropic-version"):
            raise WireError(400, "anthropic-version: header is required")
        return body

    async def messages(self, request: Request) -> Response:
        raw = await request.body()
        try:
            body = self._admit(request, raw)
            check_request(body)
            plan = plan_message(body, raw)
        except WireError as error:
            return _error(error)
        if body.get("stream") is not True:
            return Response(json.dumps(render_message(plan)), 200, media_type="application/json")
        events = render_events(plan)

        async def stream() -> Any:
            for event in events:
                yield event

        return StreamingResponse(stream(), media_type="text/event-stream", headers={"cache-control": "no-cache"})

    async def count_tokens(self, request: Request) -> Response:
        """`{"input_tokens": N}`: the words of the system prompt and the messages' texts (no
        max_tokens is asked for, as Anthropic's route asks none)."""
        raw = await request.body()
        try:
            body = self._admit(request, raw)
        except WireError as error:
            return _error(error)
        if not isinstance(body, dict) or "max_tokens" in body:
            return _error(WireError(400, "max_tokens: Extra inputs are not permitted" if isinstance(body, dict) else "body: not an object"))
        return Response(json.dumps({"input_tokens": len(json.dumps([body.get("system"), body.get("messages")]).split())}), 200,
                        media_type="application/json")

    async def models(self, request: Request) -> Response:
        try:
            self._admit(request, None)
        except WireError as error:
            return _error(error)
        after = request.query_params.get("after_id")
        start = MODELS.index(after) + 1 if after in MODELS else 0
        limit = min(int(request.query_params.get("limit") or 20), PAGE_SIZE)
        page = MODELS[start:start + limit]
        data = [{"type": "model", "id": model, "display_name": model.replace("-", " ").title(), "created_at": CREATED_AT} for model in page]
        return Response(json.dumps({"data": data, "has_more": start + limit < len(MODELS), "first_id": page[0] if page else None,
                                    "last_id": page[-1] if page else None}), 200, media_type="application/json")


def create_app(api_key: str | None = None, recorded: list[RecordedRequest] | None = None) -> Starlette:
    handlers = FakeAnthropicApp(api_key, recorded if recorded is not None else [])
    return Starlette(routes=[Route("/v1/messages", handlers.messages, methods=["POST"]),
                             Route("/v1/messages/count_tokens", handlers.count_tokens, methods=["POST"]),
                             Route("/v1/models", handlers.models, methods=["GET"])])
