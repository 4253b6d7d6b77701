"""How failures read in the Responses API: an upstream's errors in the request's own terms, a
failed response's `error`, and the model server's own words about an image read as OpenAI's codes.

Every mapping is a table here: `RESPONSES_PARAMS` (a chat request's parameter -> the Responses
request's), `RESPONSE_ERROR_CODES` (the closed set a failed response's `error.code` comes from),
`IMAGE_MISTAKES` (a model server's message about an image -> OpenAI's code for it), and the two
errors of the server's own (`SERVER_ERROR`, `SHUTDOWN_ERROR`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from contract import fastjson
from contract.errors import APIError, InvalidRequestError, UpstreamError

__all__ = ["RESPONSE_ERROR_CODES", "SERVER_ERROR", "SHUTDOWN_ERROR", "image_error", "in_responses_terms", "response_error", "upstream_json"]

RESPONSES_PARAMS = (("messages", "input"), ("response_format.json_schema.schema", "text.format.schema"),
                    ("response_format", "text.format"), ("max_completion_tokens", "max_output_tokens"), ("max_tokens", "max_output_tokens"))
"""What a chat completion's parameters are called in the Responses request they were made from."""

RESPONSE_ERROR_CODES = frozenset({
    "server_error", "rate_limit_exceeded", "invalid_prompt", "data_residency_mismatch", "bio_policy",
    "misalignment_policy_violation", "vector_store_timeout", "invalid_image", "invalid_image_format",
    "invalid_base64_image", "invalid_image_url", "image_too_large", "image_too_small", "image_parse_error",
    "image_content_policy_violation", "invalid_image_mode", "image_file_too_large", "unsupported_image_media_type",
    "empty_image_file", "failed_to_download_image", "image_file_not_found",
})
"""The `code` values of a Response's `error` (openai.types.responses.ResponseError)."""

IMAGE_MISTAKES = (
    (re.compile(r"(fail|unable|could ?n[o']t)\w*\s+(to\s+)?(fetch|download|retrieve|get)\b.*image|image.*\b(404|not found)\b", re.I),
     "failed_to_download_image"),
    (re.compile(r"image.*(too (large|big)|exceeds)|(too (large|big)|exceeds).*image", re.I), "image_too_large"),
    (re.compile(r"image.*(truncated|corrupt)|(truncated|corrupt).*image", re.I), "image_parse_error"),
    (re.compile(r"base64.*image|image.*base64", re.I), "invalid_base64_image"),
    (re.compile(r"cannot identify image|unknown (image )?format|unsupported image|invalid image|not a valid image|"
                r"(fail|unable)\w* to (load|decode|open|process) (the )?image", re.I), "invalid_image_format"),
)
"""What model servers that do not speak OpenAI's image codes (vLLM, Ollama, llama.cpp) say about an
image they cannot take, read as the code OpenAI gives the same mistake. Checked in this order."""

SHUTDOWN_ERROR = {"code": "server_error", "message": "The server shut down before this response finished."}
SERVER_ERROR = {"code": "server_error", "message": "The server had an error while producing this response; its log names the cause."}


def in_responses_terms(error: APIError) -> APIError:
    """`error` from a model call, its `param` named as the Responses request names it (a model
    server names the chat request's: `messages` for a context too long)."""
    param = error.param
    if not param:
        return error
    for chat, responses in RESPONSES_PARAMS:
        if param == chat or param.startswith(chat + ".") or param.startswith(chat + "["):
            error.param = responses + param[len(chat):] if chat != "messages" else responses
            break
    return error


def response_error(error: APIError) -> dict[str, Any]:
    """A failed response's `error`. Its `code` is one of the Responses API's (clients match on
    that closed set): the upstream's own when it is one of them (an image error, say), else one
    chosen by status, with the upstream's code kept in the message."""
    if error.code in RESPONSE_ERROR_CODES:
        code = error.code
    elif error.status == 429:
        code = "rate_limit_exceeded"
    elif 400 <= error.status < 500:
        code = "invalid_prompt"
    else:
        code = "server_error"
    detail = f" ({error.code})" if error.code and error.code != code else ""
    return {"code": code, "message": f"{error.message}{detail}"}


def image_error(error: APIError, messages: Sequence[Mapping[str, Any]]) -> InvalidRequestError | None:
    """The 400 OpenAI answers for an image it cannot take, when the model server's error is about
    one of the request's images in its own words (whatever its status: vLLM answers a URL it cannot
    fetch with a 500); None for any other error."""
    if error.code in RESPONSE_ERROR_CODES or error.status in (429, 503, 504) or not _has_images(messages):
        return None
    for pattern, code in IMAGE_MISTAKES:
        if pattern.search(error.message):
            return InvalidRequestError(f"The model could not use an image of the input: {error.message[:300]}", code=code)
    return None


def _has_images(messages: Sequence[Mapping[str, Any]]) -> bool:
    return any(isinstance(part, Mapping) and part.get("type") == "image_url"
               for message in messages if isinstance(message.get("content"), list) for part in message["content"])


def upstream_json(raw: bytes) -> dict[str, Any]:
    """A chat completion or chunk from the model server; one that is not a JSON object is the
    server's fault: a 502 (or, in a stream, `response.failed`), never a 500 of ours."""
    try:
        value = fastjson.loads(raw)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise UpstreamError(f"The model server answered with malformed data, not a JSON object: {raw[:120]!r}",
                            status_code=502, code="upstream_malformed")
    return value
