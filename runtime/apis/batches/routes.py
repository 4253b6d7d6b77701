"""Routes of the Batch API (/v1/batches...), as OpenAI serves them."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from contract.batches.protocol import BATCH_ENDPOINTS, BatchesProvider
from contract.checks import parse_json_object
from contract.errors import InvalidRequestError
from runtime.apis.common import JSONBytes, METADATA_SCHEMA, json_body
from runtime.http.direct_routes import read_body
from runtime.http.routing import Routes

__all__ = ["router"]

_BODY = json_body(["input_file_id", "endpoint", "completion_window"], {
    "input_file_id": {"type": "string", "description": "a file uploaded with purpose `batch`: one JSON request a line"},
    "endpoint": {"type": "string", "enum": list(BATCH_ENDPOINTS)},
    "completion_window": {"type": "string", "enum": ["24h"]},
    "metadata": METADATA_SCHEMA,
    "output_expires_after": {"type": "object", "required": ["anchor", "seconds"], "properties": {
        "anchor": {"type": "string", "enum": ["created_at"]}, "seconds": {"type": "integer", "minimum": 3600, "maximum": 2592000}}},
}, more=False)


def router(impl: BatchesProvider) -> Routes:
    routes = Routes()

    @routes.post("/batches", summary="Create a batch: the requests of a file, run in the background", openapi_extra=_BODY)
    async def create_batch(request: Request) -> Response:
        return JSONBytes(await impl.create_batch(parse_json_object(await read_body(request))))

    @routes.get("/batches", summary="List batches, newest first")
    async def list_batches(after: str | None = None, limit: int = 20) -> Response:
        if not 1 <= limit <= 100:
            raise InvalidRequestError("Invalid 'limit': expected an integer from 1 to 100.", param="limit", code="invalid_value")
        batches, more = await impl.list_batches(after, limit)
        return JSONBytes({"object": "list", "data": batches, "first_id": batches[0]["id"] if batches else None,
                          "last_id": batches[-1]["id"] if batches else None, "has_more": more})

    @routes.get("/batches/{batch_id}", summary="Get a batch")
    async def get_batch(batch_id: str) -> Response:
        return JSONBytes(await impl.get_batch(batch_id))

    @routes.post("/batches/{batch_id}/cancel", summary="Cancel a batch: no new request starts; the finished ones are kept")
    async def cancel_batch(batch_id: str) -> Response:
        return JSONBytes(await impl.cancel_batch(batch_id))

    return routes
