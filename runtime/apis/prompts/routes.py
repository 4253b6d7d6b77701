"""Routes of the prompts API (/v1/prompts...), as OGX serves them."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from runtime.apis.common import JSONBytes, json_body
from contract.checks import parse_json_object
from contract.prompts.protocol import PromptsProvider, check_template
from contract.errors import InvalidRequestError, NotFoundError
from runtime.http.direct_routes import read_body
from runtime.http.routing import Routes

__all__ = ["router"]


def router(impl: PromptsProvider) -> Routes:
    routes = Routes()

    @routes.post("/prompts", summary="Create a prompt (its version 1, the default)", openapi_extra=json_body(
        ["prompt"], {"prompt": {"type": "string"}, "variables": {"type": "array", "items": {"type": "string"}}}, more=False))
    async def create_prompt(request: Request) -> Response:
        body = await _body(request, ("prompt", "variables"))
        return JSONBytes(await impl.create_prompt(*check_template(body)))

    @routes.get("/prompts", summary="List prompts (the default version of each)")
    async def list_prompts() -> Response:
        return JSONBytes({"object": "list", "data": await impl.list_prompts()})

    @routes.get("/prompts/{prompt_id}", summary="Get a prompt: a version, or the default one")
    async def get_prompt(prompt_id: str, version: str | None = None) -> Response:
        return JSONBytes(await impl.get_prompt(_id(prompt_id), _version(version, "version") if version is not None else None))

    @routes.get("/prompts/{prompt_id}/versions", summary="List a prompt's versions")
    async def list_versions(prompt_id: str) -> Response:
        return JSONBytes({"object": "list", "data": await impl.list_versions(_id(prompt_id))})

    new_version = json_body(["prompt", "version"], {
        "prompt": {"type": "string"}, "variables": {"type": "array", "items": {"type": "string"}},
        "version": {"type": "integer", "minimum": 1}, "set_as_default": {"type": "boolean"}}, more=False)

    # One route per method (PUT as OGX, POST as OpenAI's style), so each has its own operation id.
    @routes.put("/prompts/{prompt_id}", summary="Save a new version of a prompt", openapi_extra=new_version,
                operation_id="update_prompt_put")
    @routes.post("/prompts/{prompt_id}", summary="Save a new version of a prompt", openapi_extra=new_version,
                 operation_id="update_prompt_post")
    async def update_prompt(prompt_id: str, request: Request) -> Response:
        body = await _body(request, ("prompt", "variables", "version", "set_as_default"))
        template, variables = check_template(body)
        if body.get("version") is None:
            raise InvalidRequestError("Missing required parameter: 'version' (the latest version, which this one follows).",
                                      param="version", code="missing_required_parameter")
        default = body.get("set_as_default", True)
        if not isinstance(default, bool):
            raise InvalidRequestError("Invalid type for 'set_as_default': expected a boolean.", param="set_as_default", code="invalid_type")
        return JSONBytes(await impl.update_prompt(_id(prompt_id), template, variables, _version(body["version"], "version"), default))

    default_version = json_body(["version"], {"version": {"type": "integer", "minimum": 1}}, more=False)

    @routes.put("/prompts/{prompt_id}/set-default-version", summary="Choose a prompt's default version", openapi_extra=default_version,
                operation_id="set_default_version_put")
    @routes.post("/prompts/{prompt_id}/set-default-version", summary="Choose a prompt's default version", openapi_extra=default_version,
                 operation_id="set_default_version_post")
    async def set_default_version(prompt_id: str, request: Request) -> Response:
        body = await _body(request, ("version",))
        if body.get("version") is None:
            raise InvalidRequestError("Missing required parameter: 'version'.", param="version", code="missing_required_parameter")
        return JSONBytes(await impl.set_default_version(_id(prompt_id), _version(body["version"], "version")))

    @routes.delete("/prompts/{prompt_id}", summary="Delete a prompt and its versions")
    async def delete_prompt(prompt_id: str) -> Response:
        await impl.delete_prompt(_id(prompt_id))
        return JSONBytes({"id": prompt_id, "object": "prompt.deleted", "deleted": True})

    return routes


async def _body(request: Request, known: tuple[str, ...]) -> dict[str, Any]:
    body = parse_json_object(await read_body(request))
    for key in body:
        if key not in known:
            raise InvalidRequestError(f"Unrecognized request argument supplied: {key}", param=key, code="unknown_parameter")
    return body


def _id(prompt_id: str) -> str:
    if not prompt_id.startswith("pmpt_") or len(prompt_id) > 64:
        raise NotFoundError(f"No prompt found with id '{prompt_id[:64]}'.", param="prompt_id", code="not_found")
    return prompt_id


def _version(value: Any, param: str) -> int:
    try:
        number = int(value) if not isinstance(value, bool) else 0
    except (TypeError, ValueError):
        number = 0
    if number < 1 or (isinstance(value, float) and not value.is_integer()):
        raise InvalidRequestError(f"Invalid '{param}': expected a version number (1 or more).", param=param, code="invalid_value")
    return number
