"""Routes of the Vector stores API (/v1/vector_stores...), as the openai SDK calls them."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from runtime.apis.common import METADATA_SCHEMA, JSONBytes, json_body
from contract.checks import cursor_page, parse_json_object, validate_id, validate_limit, validate_order
from contract.vector_stores import models
from contract.vector_stores.protocol import FILE_STATUSES, Page, VectorStoresProvider
from contract.errors import InvalidRequestError
from runtime.http.direct_routes import read_body
from runtime.http.routing import Routes

__all__ = ["router"]


def router(impl: VectorStoresProvider) -> Routes:
    routes = Routes()
    _add_store_routes(routes, impl)
    _add_file_routes(routes, impl)
    _add_batch_routes(routes, impl)
    return routes


def _add_store_routes(routes: Routes, impl: VectorStoresProvider) -> None:
    """The stores themselves, and searching one."""

    @routes.post("/vector_stores", summary="Create a vector store, optionally with files", openapi_extra=json_body([], {
        "name": {"type": ["string", "null"]}, "file_ids": {"type": "array", "items": {"type": "string"}}, "metadata": METADATA_SCHEMA,
        "chunking_strategy": {"type": "object"}, "expires_after": {"type": ["object", "null"]}, "description": {"type": ["string", "null"]},
    }, optional=True))
    async def create_store(request: Request) -> Response:
        return JSONBytes(await impl.create_store(models.parse_create_store(await _body(request, allow_empty=True))))

    @routes.get("/vector_stores", summary="List vector stores")
    async def list_stores(limit: int = 20, order: str = "desc", after: str | None = None, before: str | None = None) -> Response:
        data, has_more = await impl.list_stores(_page(limit, order, after, before))
        return JSONBytes(cursor_page(data, has_more))

    @routes.get("/vector_stores/{store_id}", summary="Get a vector store")
    async def get_store(store_id: str) -> Response:
        return JSONBytes(await impl.get_store(_store(store_id)))

    @routes.post("/vector_stores/{store_id}", summary="Modify a vector store's name, expiry or metadata", openapi_extra=json_body([], {
        "name": {"type": ["string", "null"]}, "metadata": METADATA_SCHEMA, "expires_after": {"type": ["object", "null"]}}, more=False))
    async def update_store(store_id: str, request: Request) -> Response:
        return JSONBytes(await impl.update_store(_store(store_id), models.parse_update_store(await _body(request))))

    @routes.delete("/vector_stores/{store_id}", summary="Delete a vector store (its files stay in the Files API)")
    async def delete_store(store_id: str) -> Response:
        return JSONBytes(await impl.delete_store(_store(store_id)))

    @routes.post("/vector_stores/{store_id}/search", summary="Search a vector store", openapi_extra=json_body(["query"], {
        "query": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]},
        "max_num_results": {"type": "integer", "minimum": 1, "maximum": models.MAX_RESULTS}, "filters": {"type": ["object", "null"]},
        "ranking_options": {"type": ["object", "null"]}, "rewrite_query": {"type": "boolean"},
        "search_mode": {"type": "string", "enum": ["keyword", "vector", "hybrid"]}}, more=False))
    async def search(store_id: str, request: Request) -> Response:
        query = models.parse_search(await _body(request))
        hits = await impl.search([_store(store_id)], query)
        return JSONBytes({"object": "vector_store.search_results.page", "search_query": list(query.queries),
                          "data": [hit.public() for hit in hits], "has_more": False, "next_page": None})



def _add_file_routes(routes: Routes, impl: VectorStoresProvider) -> None:
    """A store's files: added, listed, read, updated, removed."""

    @routes.post("/vector_stores/{store_id}/files", summary="Add a file to a vector store", openapi_extra=json_body(["file_id"], {
        "file_id": {"type": "string"}, "attributes": {"type": ["object", "null"]}, "chunking_strategy": {"type": "object"}}))
    async def attach_file(store_id: str, request: Request) -> Response:
        return JSONBytes(await impl.attach_file(_store(store_id), models.parse_file_spec(await _body(request), "")))

    @routes.get("/vector_stores/{store_id}/files", summary="List a vector store's files")
    async def list_files(store_id: str, limit: int = 20, order: str = "desc", after: str | None = None, before: str | None = None,
                         filter: str | None = None) -> Response:
        data, has_more = await impl.list_files(_store(store_id), _status(filter), _page(limit, order, after, before))
        return JSONBytes(cursor_page(data, has_more))

    @routes.get("/vector_stores/{store_id}/files/{file_id}", summary="Get a vector store file")
    async def get_file(store_id: str, file_id: str) -> Response:
        return JSONBytes(await impl.get_file(_store(store_id), file_id))

    @routes.post("/vector_stores/{store_id}/files/{file_id}", summary="Update a vector store file's attributes",
                 openapi_extra=json_body(["attributes"], {"attributes": {"type": ["object", "null"]}}, more=False))
    async def update_file(store_id: str, file_id: str, request: Request) -> Response:
        body = await _body(request)
        if "attributes" not in body:
            raise InvalidRequestError("Missing required parameter: 'attributes'.", param="attributes", code="missing_required_parameter")
        models.check_unknown(body, frozenset({"attributes"}))
        return JSONBytes(await impl.update_file(_store(store_id), file_id, models.parse_attributes(body["attributes"])))

    @routes.delete("/vector_stores/{store_id}/files/{file_id}", summary="Remove a file from a vector store (the file stays)")
    async def detach_file(store_id: str, file_id: str) -> Response:
        return JSONBytes(await impl.detach_file(_store(store_id), file_id))

    @routes.get("/vector_stores/{store_id}/files/{file_id}/content", summary="The parsed text of a vector store file")
    async def file_content(store_id: str, file_id: str) -> Response:
        texts = await impl.file_content(_store(store_id), file_id)
        return JSONBytes({"object": "vector_store.file_content.page", "data": [{"type": "text", "text": text} for text in texts],
                          "has_more": False, "next_page": None})



def _add_batch_routes(routes: Routes, impl: VectorStoresProvider) -> None:
    """Batches of files added to a store at once."""

    @routes.post("/vector_stores/{store_id}/file_batches", summary="Add several files to a vector store", openapi_extra=json_body([], {
        "file_ids": {"type": "array", "items": {"type": "string"}}, "files": {"type": "array", "items": {"type": "object"}},
        "attributes": {"type": ["object", "null"]}, "chunking_strategy": {"type": "object"}}, more=False))
    async def create_batch(store_id: str, request: Request) -> Response:
        return JSONBytes(await impl.create_batch(_store(store_id), models.parse_create_batch(await _body(request))))

    @routes.get("/vector_stores/{store_id}/file_batches/{batch_id}", summary="Get a file batch")
    async def get_batch(store_id: str, batch_id: str) -> Response:
        return JSONBytes(await impl.get_batch(_store(store_id), _batch(batch_id)))

    @routes.post("/vector_stores/{store_id}/file_batches/{batch_id}/cancel", summary="Cancel a file batch's files still in progress")
    async def cancel_batch(store_id: str, batch_id: str) -> Response:
        return JSONBytes(await impl.cancel_batch(_store(store_id), _batch(batch_id)))

    @routes.get("/vector_stores/{store_id}/file_batches/{batch_id}/files", summary="List a file batch's files")
    async def list_batch_files(store_id: str, batch_id: str, limit: int = 20, order: str = "desc", after: str | None = None,
                               before: str | None = None, filter: str | None = None) -> Response:
        page = _page(limit, order, after, before)
        data, has_more = await impl.list_files(_store(store_id), _status(filter), page, batch_id=_batch(batch_id))
        return JSONBytes(cursor_page(data, has_more))


def _store(store_id: str) -> str:
    validate_id(store_id, "vector_store_id", "vs_")
    return store_id


def _batch(batch_id: str) -> str:
    validate_id(batch_id, "batch_id", "vsfb_")
    return batch_id


def _page(limit: int, order: str, after: str | None, before: str | None) -> Page:
    return Page(validate_limit(limit), validate_order(order), after, before)


def _status(value: str | None) -> str | None:
    if value is not None and value not in FILE_STATUSES:
        raise InvalidRequestError(f"Invalid 'filter': expected one of {', '.join(FILE_STATUSES)}.", param="filter", code="invalid_value")
    return value


async def _body(request: Request, allow_empty: bool = False) -> dict[str, Any]:
    raw = await read_body(request)
    if allow_empty and not raw.strip():
        return {}
    return parse_json_object(raw)
