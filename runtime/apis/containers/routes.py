"""Routes of the Containers API (/v1/containers...), as the openai SDK calls them."""

from __future__ import annotations

from typing import Any

from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from contract.checks import cursor_page, parse_json_object, validate_limit, validate_order
from contract.containers.checks import new_container
from contract.containers.protocol import ContainersProvider
from contract.errors import InvalidRequestError, PayloadTooLargeError
from runtime.apis.common import JSONBytes, attachment, json_body
from runtime.http.direct_routes import read_body
from runtime.http.routing import Routes

__all__ = ["router", "upload_limits"]

UPLOAD_PATH = "/v1/containers/{container_id}/files"
_NEW_CONTAINER = json_body(["name"], {
    "name": {"type": "string", "minLength": 1, "maxLength": 256},
    "file_ids": {"type": "array", "items": {"type": "string"}, "maxItems": 100},
    "expires_after": {"type": "object", "required": ["anchor", "minutes"], "additionalProperties": False, "properties": {
        "anchor": {"type": "string", "enum": ["last_active_at"]}, "minutes": {"type": "integer", "minimum": 1}}},
    "memory_limit": {"type": "string", "enum": ["1g", "4g", "16g", "64g"]},
    "network_policy": {"type": "object", "required": ["type"], "properties": {
        "type": {"type": "string", "enum": ["disabled", "allowlist"]},
        "allowed_domains": {"type": "array", "items": {"type": "string"}, "minItems": 1}}},
}, more=False)
_NEW_FILE = {"requestBody": {"required": True, "content": {
    "multipart/form-data": {"schema": {"type": "object", "properties": {"file": {"type": "string", "format": "binary"},
                                                                          "file_id": {"type": "string"}}}},
    "application/json": {"schema": {"type": "object", "required": ["file_id"], "additionalProperties": False,
                                    "properties": {"file_id": {"type": "string"}}}}}}}


def upload_limits(impl: ContainersProvider) -> dict[tuple[str, str], int]:
    """The request size limit of the upload route: the provider's file size (plus the form's)."""
    return {("POST", UPLOAD_PATH): impl.max_file_bytes + 64 * 1024}


def router(impl: ContainersProvider) -> Routes:
    routes = Routes()

    @routes.post("/containers", summary="Create a container", openapi_extra=_NEW_CONTAINER)
    async def create_container(request: Request) -> Response:
        return JSONBytes(await impl.create_container(new_container(parse_json_object(await read_body(request)))))

    @routes.get("/containers", summary="List containers")
    async def list_containers(after: str | None = None, limit: int = 20, order: str = "desc", name: str | None = None) -> Response:
        data, has_more = await impl.list_containers(after, validate_limit(limit), validate_order(order), name)
        return JSONBytes(cursor_page(data, has_more))

    @routes.get("/containers/{container_id}", summary="Get a container")
    async def get_container(container_id: str) -> Response:
        return JSONBytes(await impl.get_container(container_id))

    @routes.delete("/containers/{container_id}", summary="Delete a container, its files and its sandbox")
    async def delete_container(container_id: str) -> Response:
        return JSONBytes(await impl.delete_container(container_id))

    @routes.post("/containers/{container_id}/files", summary="Put a file in a container (multipart: file; or file_id)",
                 openapi_extra=_NEW_FILE)
    async def create_file(container_id: str, request: Request) -> Response:
        if request.headers.get("content-type", "").startswith("multipart/form-data"):
            return JSONBytes(await _from_form(impl, container_id, request))
        body = parse_json_object(await read_body(request))
        for key in body:
            if key != "file_id":
                raise InvalidRequestError(f"Unrecognized request argument supplied: {str(key)[:80]}", param=str(key), code="unknown_parameter")
        return JSONBytes(await impl.create_file(container_id, file_id=_file_id(body.get("file_id"))))

    @routes.get("/containers/{container_id}/files", summary="List a container's files")
    async def list_files(container_id: str, after: str | None = None, limit: int = 20, order: str = "desc") -> Response:
        data, has_more = await impl.list_files(container_id, after, validate_limit(limit), validate_order(order))
        return JSONBytes(cursor_page(data, has_more))

    @routes.get("/containers/{container_id}/files/{file_id}", summary="Get a container file")
    async def get_file(container_id: str, file_id: str) -> Response:
        return JSONBytes(await impl.get_file(container_id, file_id))

    @routes.get("/containers/{container_id}/files/{file_id}/content", summary="Download a container file's bytes")
    async def file_content(container_id: str, file_id: str) -> Response:
        content = await impl.file_content(container_id, file_id)
        # No content-length: code in the container may have changed the file since it was recorded.
        return StreamingResponse(content.chunks, media_type="application/octet-stream",
                                 headers={"content-disposition": attachment(content.filename)})

    @routes.delete("/containers/{container_id}/files/{file_id}", summary="Delete a container file")
    async def delete_file(container_id: str, file_id: str) -> Response:
        return JSONBytes(await impl.delete_file(container_id, file_id))

    return routes


async def _from_form(impl: ContainersProvider, container_id: str, request: Request) -> dict[str, Any]:
    # Parts past 1 MiB are spooled to disk by the parser; the file is read whole (up to the limit)
    # since a sandbox takes a file's bytes at once.
    async with request.form(max_files=1, max_fields=4) as form:
        upload = form.get("file")
        if isinstance(upload, UploadFile):
            data = await upload.read(impl.max_file_bytes + 1)
            if len(data) > impl.max_file_bytes:
                raise PayloadTooLargeError(f"The file is larger than this server's limit of {impl.max_file_bytes} bytes for a container "
                                           "file.", param="file", code="file_too_large")
            return await impl.create_file(container_id, data=data, filename=upload.filename or "upload")
        if form.get("file_id") is not None:
            return await impl.create_file(container_id, file_id=_file_id(form.get("file_id")))
    raise InvalidRequestError("Missing required parameter: 'file' (an upload) or 'file_id'.", param="file", code="missing_required_parameter")


def _file_id(value: object) -> str:
    if value is None:
        raise InvalidRequestError("Missing required parameter: 'file' (an upload) or 'file_id'.", param="file_id",
                                  code="missing_required_parameter")
    if not isinstance(value, str) or not value:
        raise InvalidRequestError("Invalid type for 'file_id': expected a file id.", param="file_id", code="invalid_type")
    return value
