"""A batch's input file, read line by line as it streams in (never held whole), and each line
checked as OpenAI checks it: a JSON object with a `custom_id` unique in the file, `method` POST,
`url` the batch's endpoint, and a `body` object naming the batch's one model, not streamed; and
the body checked as its endpoint's route checks it (`ENDPOINT_CHECKS`), so a mistake is named
with its line before any request runs. What only the endpoint can know (an unknown model, an
upstream's refusal) is the line's answer when it runs, in the error file."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from contract.errors import APIError
from contract.files.protocol import FileContent
from contract.responses.models import CreateResponse
from providers.messages.checks import check_request
from runtime.apis.inference.bodies import check_chat_body, check_completions_body, check_embeddings_body

__all__ = ["Checker", "Line", "read_lines"]

MAX_LINE_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class Line:
    """One request line: its number (1-based, as an editor counts), its `custom_id`, its body's
    bytes; or the mistake that keeps it from running (`error`: code, message, param)."""

    number: int
    custom_id: str | None
    body: bytes | None
    error: dict[str, Any] | None = None


async def read_lines(content: FileContent) -> AsyncIterator[tuple[int, bytes]]:
    """(line number, bytes) of each line that is not blank."""
    rest = b""
    number = 0
    async for chunk in content.chunks:
        rest += chunk
        *whole, rest = rest.split(b"\n")
        for raw in whole:
            number += 1
            if raw.strip():
                yield number, raw
        if len(rest) > MAX_LINE_BYTES:
            raise ValueError(f"line {number + 1} is longer than {MAX_LINE_BYTES} bytes")
    if rest.strip():
        yield number + 1, rest


class Checker:
    """Checks a file's lines in order (a `custom_id` seen before, a model other than the first
    line's, are mistakes of the line that repeats or differs). The same file checked again gives
    the same verdicts: a resumed batch knows which lines ran from which did not."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self.seen: set[str] = set()
        self.model: str | None = None

    def check(self, number: int, raw: bytes) -> Line:
        try:
            request = json.loads(raw)
        except ValueError:
            return _refused(number, None, "invalid_json_line", "This line is not valid JSON.", None)
        if not isinstance(request, dict):
            return _refused(number, None, "invalid_json_line", "This line is not a JSON object.", None)
        custom_id = request.get("custom_id")
        if not isinstance(custom_id, str) or not custom_id:
            return _refused(number, None, "missing_required_parameter", "Missing required parameter: 'custom_id'.", "custom_id")
        if custom_id in self.seen:
            return _refused(number, custom_id, "duplicate_custom_id", f"The custom_id '{custom_id}' is used by an earlier line: each "
                            "request's custom_id must be unique in the file.", "custom_id")
        self.seen.add(custom_id)
        error = self._request_error(request)
        if error is not None:
            return _refused(number, custom_id, *error)
        encoded = json.dumps(request["body"]).encode()  # before a check may touch the body
        error = body_error(self.endpoint, request["body"])
        if error is not None:
            return _refused(number, custom_id, *error)
        return Line(number, custom_id, encoded)

    def _request_error(self, request: dict[str, Any]) -> tuple[str, str, str | None] | None:
        extra = sorted(set(request) - {"custom_id", "method", "url", "body"})
        if extra:
            return "invalid_request", f"Unknown parameter: '{extra[0]}'.", extra[0]
        if request.get("method") != "POST":
            return "invalid_method", f"The method must be 'POST', not {request.get('method')!r}.", "method"
        if request.get("url") != self.endpoint:
            return ("mismatched_endpoint", f"The url {request.get('url')!r} is not the batch's endpoint, '{self.endpoint}': every "
                    "request of a batch goes to its endpoint.", "url")
        body = request.get("body")
        if not isinstance(body, dict):
            return "missing_required_parameter", "Missing required parameter: 'body' (a JSON object).", "body"
        if body.get("stream") is True:
            return "invalid_request", "A batch's requests are not streamed: 'stream' must not be true.", "body.stream"
        model = body.get("model")
        if not isinstance(model, str) or not model:
            return "missing_required_parameter", "Missing required parameter: 'body.model'.", "body.model"
        if self.model is None:
            self.model = model
        elif model != self.model:
            return ("mismatched_model", f"The model '{model}' is not the batch's, '{self.model}' (its first request's): a batch's "
                    "requests all use one model.", "body.model")
        return None


def _refused(number: int, custom_id: str | None, code: str, message: str, param: str | None) -> Line:
    return Line(number, custom_id, None, {"code": code, "message": message, "param": param, "line": number})


def body_error(endpoint: str, body: dict[str, Any]) -> tuple[str, str, str | None] | None:
    """The first mistake the endpoint's route would refuse `body` for (code, message, `body.`
    param), or None."""
    try:
        _ENDPOINT_CHECKS[endpoint](body)
    except APIError as error:
        return error.code or "invalid_request", error.message, f"body.{error.param}" if error.param else "body"
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        return "invalid_request", f"{where}: {first['msg']}" if where else str(first["msg"]), f"body.{where}" if where else "body"
    return None


def _responses(body: dict[str, Any]) -> None:
    CreateResponse.model_validate(body)


_ENDPOINT_CHECKS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "/v1/chat/completions": check_chat_body, "/v1/completions": check_completions_body, "/v1/embeddings": check_embeddings_body,
    "/v1/responses": _responses, "/v1/messages": check_request,
}
"""What each endpoint's route checks of a body before it calls anything."""
