"""Routes of the Files API (/v1/files...), as the openai SDK calls them."""

from __future__ import annotations

import logging
import os
from typing import Any

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.datastructures import UploadFile

from runtime.apis.common import JSONBytes, attachment
from contract.checks import cursor_page, validate_limit, validate_order
from contract.files.protocol import NO_ROOM, PURPOSES, FilesProvider, no_room
from contract.vector_stores.protocol import VectorStoresProvider
from contract.errors import InvalidRequestError
from runtime.http.routing import Routes

__all__ = ["router", "upload_limits"]

log = logging.getLogger("stack")

MIN_EXPIRY_S, MAX_EXPIRY_S = 3600, 30 * 24 * 3600  # OpenAI's bounds for expires_after.seconds
FILE_LIST_MAX = 10_000


def upload_limits(impl: FilesProvider) -> dict[tuple[str, str], int]:
    """The request size limit of the upload route: the provider's file size (plus the form's)."""
    return {("POST", "/v1/files"): impl.max_file_bytes + 64 * 1024}


def router(impl: FilesProvider, vector_stores: VectorStoresProvider | None = None) -> Routes:
    routes = Routes()

    @routes.post("/files", summary="Upload a file (multipart: file, purpose, expires_after)", openapi_extra={"requestBody": {
        "required": True, "content": {"multipart/form-data": {"schema": {"type": "object", "required": ["file", "purpose"], "properties": {
            "file": {"type": "string", "format": "binary"}, "purpose": {"type": "string", "enum": list(PURPOSES)},
            "expires_after[anchor]": {"type": "string", "enum": ["created_at"]},
            "expires_after[seconds]": {"type": "integer", "minimum": MIN_EXPIRY_S, "maximum": MAX_EXPIRY_S}}}}}}})
    async def create_file(request: Request) -> Response:
        try:
            return await _create_file(request)
        except OSError as error:  # the parser's spool (or a provider's write) on a disk with no room
            if error.errno not in NO_ROOM:
                raise
            log.warning("an upload did not fit on the server's disk: %s", os.strerror(error.errno))
            raise no_room() from None

    async def _create_file(request: Request) -> Response:
        # Parts past 1 MiB are spooled to disk by the parser: an upload is never held whole in memory.
        async with request.form(max_files=1, max_fields=8) as form:
            upload = form.get("file")
            if not isinstance(upload, UploadFile):
                raise InvalidRequestError("Missing required parameter: 'file'.", param="file", code="missing_required_parameter")
            purpose = form.get("purpose")
            if purpose is None:
                raise InvalidRequestError("Missing required parameter: 'purpose'.", param="purpose", code="missing_required_parameter")
            if purpose not in PURPOSES:
                raise InvalidRequestError(f"Invalid value for 'purpose': {str(purpose)[:40]!r} (expected one of: {', '.join(PURPOSES)}).",
                                          param="purpose", code="invalid_value")
            expires = _expires_after(form.get("expires_after[anchor]"), form.get("expires_after[seconds]"))
            filename = upload.filename or "upload"
            return JSONBytes(await impl.create_file(upload.file, filename, str(purpose), expires))

    @routes.get("/files", summary="List files")
    async def list_files(purpose: str | None = None, after: str | None = None, limit: int = 10_000, order: str = "desc") -> Response:
        data, has_more = await impl.list_files(purpose, after, validate_limit(limit, FILE_LIST_MAX), validate_order(order))
        return JSONBytes(cursor_page(data, has_more))

    @routes.get("/files/{file_id}", summary="Get a file's metadata")
    async def get_file(file_id: str) -> Response:
        return JSONBytes(await impl.get_file(file_id))

    @routes.get("/files/{file_id}/content", summary="Download a file's bytes")
    async def file_content(file_id: str) -> Response:
        content = await impl.file_content(file_id)
        headers = {"content-length": str(content.size), "content-disposition": attachment(content.filename)}
        return StreamingResponse(content.chunks, media_type="application/octet-stream", headers=headers)

    @routes.delete("/files/{file_id}", summary="Delete a file, and remove it from every vector store")
    async def delete_file(file_id: str) -> Response:
        # The files provider decides whether this caller may delete the file (else its 404); only
        # then do the stores, whoever's they are, let it go.
        deleted = await impl.delete_file(file_id)
        if vector_stores is not None:
            await vector_stores.forget_file(file_id)
        return JSONBytes(deleted)

    return routes


def _expires_after(anchor: Any, seconds: Any) -> int | None:
    if anchor is None and seconds is None:
        return None
    if anchor != "created_at":
        raise InvalidRequestError("Invalid value for 'expires_after.anchor': expected 'created_at'.", param="expires_after.anchor",
                                  code="invalid_value")
    try:
        value = int(str(seconds))
    except ValueError:
        value = -1
    if not MIN_EXPIRY_S <= value <= MAX_EXPIRY_S:
        raise InvalidRequestError(f"Invalid value for 'expires_after.seconds': expected {MIN_EXPIRY_S} to {MAX_EXPIRY_S}.",
                                  param="expires_after.seconds", code="invalid_value")
    return value
