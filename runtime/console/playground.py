"""The playground: a Responses conversation with any listed model, streamed token by token. The
page's script posts each turn to `/console/api/responses` (with the CSRF token in a header), which
sends it to `POST /v1/responses` as the signed-in principal and passes its events on as they come."""

from __future__ import annotations

import json

from starlette.responses import PlainTextResponse, Response, StreamingResponse

from runtime.console.page import SECURITY_HEADERS, Page

__all__ = ["ROUTES"]

_TURN_FIELDS = {"model", "input", "instructions", "temperature", "max_output_tokens", "reasoning", "previous_response_id", "tools",
                "store", "conversation"}


async def playground(page: Page) -> Response:
    _, models = await page.api("GET", "/models")
    llms = [model for model in (models or {}).get("data") or [] if (model.get("custom_metadata") or {}).get("model_type") != "embedding"]
    return page.render("playground.html", models=llms, conversation=page.request.query_params.get("conversation", ""))


async def turn(page: Page) -> Response:
    try:
        asked = json.loads(await page.request.body())
    except ValueError:
        return PlainTextResponse("The turn is not JSON.", 400, headers=SECURITY_HEADERS)
    if not isinstance(asked, dict):
        return PlainTextResponse("The turn is not a JSON object.", 400, headers=SECURITY_HEADERS)
    body = {key: value for key, value in asked.items() if key in _TURN_FIELDS} | {"stream": True}
    answer = await page.console.context.loopback.stream("POST", "/v1/responses", json.dumps(body).encode(), page.session.principal)
    media = answer.headers.get("content-type", "application/json")
    return StreamingResponse(answer.parts, answer.status, headers={**SECURITY_HEADERS, "x-accel-buffering": "no"}, media_type=media)


ROUTES = [("/playground", playground, ["GET"]), ("/api/responses", turn, ["POST"])]
