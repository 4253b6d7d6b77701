"""The FastAPI app's errors in OpenAI's shape: our own errors, validation errors, unknown routes and
methods (naming every method the path serves); a bug is raised on to the stack's RequestGuard."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from contract.errors import APIError, error_body, validation_error_body
from runtime.http.direct_routes import api_error_response, unknown_route

if TYPE_CHECKING:
    from fastapi import FastAPI

__all__ = ["install_error_handlers"]


def install_error_handlers(app: FastAPI) -> None:
    """OpenAI-shaped bodies for our errors, validation errors and unknown routes."""
    from fastapi.exceptions import RequestValidationError

    app.add_exception_handler(APIError, _api_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    # FastAPI's last resort would answer a bug with a plain-text 500 of its own; raised on, it reaches
    # the stack's RequestGuard, outside FastAPI, which answers in OpenAI's shape with the request id.
    app.add_exception_handler(Exception, _raise_on)


async def _raise_on(_request: Request, error: Exception) -> Response:
    raise error


async def _api_error(_request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, APIError)
    return api_error_response(error)


async def _validation_error(_request: Request, error: Exception) -> JSONResponse:
    from fastapi.exceptions import RequestValidationError

    assert isinstance(error, RequestValidationError)
    return JSONResponse(validation_error_body(error.errors()), status_code=400)


async def _http_error(request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, StarletteHTTPException)
    if isinstance(error.__cause__, APIError):
        # FastAPI wraps any error raised while it reads the body (such as our size limit) in a 400.
        return await _api_error(request, error.__cause__)
    if error.status_code == 404:
        message = unknown_route(request.method, request.url.path)
    elif error.status_code == 405:
        allowed = _allowed_methods(request)
        message = f"Method {request.method} is not allowed on {request.url.path} (allowed: {', '.join(allowed)})"
        error.headers = {**dict(error.headers or {}), "Allow": ", ".join(allowed)}
    else:
        message = str(error.detail)
    return JSONResponse(
        error_body(message, "invalid_request_error", None, None),
        status_code=error.status_code,
        headers=dict(error.headers or {}),
    )


def _allowed_methods(request: Request) -> list[str]:
    """Every method some route serves at this path: Starlette's 405 names only the first route's."""
    table: list[tuple[re.Pattern[str], set[str]]] = getattr(request.app.state, "route_methods", [])
    return sorted({method for pattern, methods in table if pattern.match(request.url.path) for method in methods})
