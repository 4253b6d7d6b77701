"""The console's browsing pages: each reads one page of the API (never a whole table) as the
signed-in principal, and renders it. Lists follow the API's cursors (`after`)."""

from __future__ import annotations

import datetime
from typing import Any
from urllib.parse import quote, urlencode

from starlette.responses import RedirectResponse, Response

from runtime.console.citations import citations
from runtime.console.page import SECURITY_HEADERS, Page

__all__ = ["ROUTES"]

PAGE = 20


def _when(stamp: Any) -> str:
    if not isinstance(stamp, (int, float)):
        return ""
    return datetime.datetime.fromtimestamp(stamp, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


async def _list(page: Page, path: str, title: str, columns: list[tuple[str, str]], link: str, filters: tuple[str, ...] = ("order",),
                **query: Any) -> Response:
    """A page of an API list, as a table whose first column links to each object's page; the
    `filters` the API takes (`order`, `model`, `purpose`) come from the page's query and stay in
    its next page's link."""
    chosen = {name: value for name in filters if (value := page.request.query_params.get(name, "").strip())}
    after = page.request.query_params.get("after")
    params = {"limit": PAGE, **query, **chosen, **({"after": after} if after else {})}
    status, body = await page.api("GET", f"{path}?{urlencode(params)}")
    if status != 200:
        return page.failed(status, body)
    rows = body.get("data") or []
    for row in rows:
        for key in ("created_at", "created"):
            if key in row:
                row[f"{key}_text"] = _when(row[key])
    following = f"?{urlencode({**chosen, 'after': rows[-1]['id']})}" if rows and body.get("has_more") else None
    return page.render("table.html", title=title, columns=columns, rows=rows, link=link, following=following, filters=filters,
                       chosen=chosen)


async def home(page: Page) -> Response:
    _, models = await page.api("GET", "/models")
    _, health = await page.api("GET", "/health")
    return page.render("home.html", models=(models or {}).get("data") or [], health=health or {})


async def responses(page: Page) -> Response:
    return await _list(page, "/responses", "Responses", [("id", "id"), ("created_at_text", "created"), ("model", "model"),
                                                          ("status", "status")], "/console/responses/")


async def response(page: Page) -> Response:
    response_id = page.request.path_params["item_id"]
    status, body = await page.api("GET", f"/responses/{response_id}")
    if status != 200:
        return page.failed(status, body)
    _, inputs = await page.api("GET", f"/responses/{response_id}/input_items?limit=100&order=asc")
    return page.render("response.html", response=body, created=_when(body.get("created_at")), inputs=(inputs or {}).get("data") or [],
                       citations=citations)


async def chats(page: Page) -> Response:
    return await _list(page, "/chat/completions", "Chat completions", [("id", "id"), ("created_text", "created"), ("model", "model")],
                       "/console/chat/", filters=("model", "order"), order="desc")


async def chat(page: Page) -> Response:
    completion_id = page.request.path_params["item_id"]
    status, body = await page.api("GET", f"/chat/completions/{completion_id}")
    if status != 200:
        return page.failed(status, body)
    _, messages = await page.api("GET", f"/chat/completions/{completion_id}/messages?limit=100")
    return page.render("object.html", title=f"Chat completion {completion_id}", sections=[
        ("Input messages", (messages or {}).get("data") or []), ("Choices", body.get("choices")), ("Usage", body.get("usage"))])


async def files(page: Page) -> Response:
    if page.request.method == "POST":
        form = await page.request.form()
        upload = form.get("file")
        if upload is None or isinstance(upload, str):
            return page.render("error.html", status=400, status_code=400, message="Choose a file to upload.")
        boundary = "stackconsoleboundary"
        body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\n{form.get('purpose') or 'user_data'}\r\n"
                f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{_safe_name(upload.filename)}\"\r\n"
                "Content-Type: application/octet-stream\r\n\r\n").encode() + await upload.read() + f"\r\n--{boundary}--\r\n".encode()
        status, created = await page.api("POST", "/files", body, {"content-type": f"multipart/form-data; boundary={boundary}"})
        if status != 200:
            return page.failed(status, created)
        return RedirectResponse("/console/files", 303, headers=SECURITY_HEADERS)
    return await _list(page, "/files", "Files", [("id", "id"), ("filename", "name"), ("purpose", "purpose"), ("bytes", "bytes"),
                                                  ("created_at_text", "created")], "/console/files/", filters=("purpose", "order"))


def _safe_name(name: str | None) -> str:
    return "".join(c for c in (name or "upload") if c.isalnum() or c in "._- ")[:200] or "upload"


async def file(page: Page) -> Response:
    file_id = page.request.path_params["item_id"]
    status, body = await page.api("GET", f"/files/{file_id}")
    if status != 200:
        return page.failed(status, body)
    return page.render("object.html", title=f"File {body.get('filename')}", sections=[("File", body)],
                       actions=[("Download", f"/console/files/{file_id}/content", "get"), ("Delete", f"/console/files/{file_id}/delete", "post")])


async def file_content(page: Page) -> Response:
    file_id = page.request.path_params["item_id"]
    answer = await page.console.context.loopback("GET", f"/v1/files/{file_id}/content", None, page.session.principal)
    headers = {**SECURITY_HEADERS, "content-disposition": "attachment", "content-type": "application/octet-stream"}
    return Response(answer.body, answer.status, headers=headers)


async def container_file_content(page: Page) -> Response:
    """A file code_interpreter's code wrote (a container_file_citation's link)."""
    container_id, file_id = page.request.path_params["item_id"], page.request.path_params["file_id"]
    answer = await page.console.context.loopback("GET", f"/v1/containers/{quote(container_id, safe='')}/files/{quote(file_id, safe='')}/content",
                                                 None, page.session.principal)
    headers = {**SECURITY_HEADERS, "content-disposition": "attachment", "content-type": "application/octet-stream"}
    return Response(answer.body, answer.status, headers=headers)


async def file_delete(page: Page) -> Response:
    status, body = await page.api("DELETE", f"/files/{page.request.path_params['item_id']}")
    if status != 200:
        return page.failed(status, body)
    return RedirectResponse("/console/files", 303, headers=SECURITY_HEADERS)


async def vector_stores(page: Page) -> Response:
    if page.request.method == "POST":
        name = str((await page.request.form()).get("name") or "").strip()
        status, created = await page.api("POST", "/vector_stores", {"name": name} if name else {})
        if status != 200:
            return page.failed(status, created)
        return RedirectResponse(f"/console/vector_stores/{created['id']}", 303, headers=SECURITY_HEADERS)
    return await _list(page, "/vector_stores", "Vector stores", [("id", "id"), ("name", "name"), ("status", "status"),
                                                                  ("created_at_text", "created")], "/console/vector_stores/")


async def vector_store(page: Page) -> Response:
    store_id = page.request.path_params["item_id"]
    status, body = await page.api("GET", f"/vector_stores/{store_id}")
    if status != 200:
        return page.failed(status, body)
    _, store_files = await page.api("GET", f"/vector_stores/{store_id}/files?limit=100")
    hits: list[Any] | None = None
    query = ""
    if page.request.method == "POST":
        query = str((await page.request.form()).get("query") or "")
        _, found = await page.api("POST", f"/vector_stores/{store_id}/search", {"query": query, "max_num_results": 10})
        hits = (found or {}).get("data") or []
    return page.render("vector_store.html", store=body, files=(store_files or {}).get("data") or [], hits=hits, query=query)


async def batches(page: Page) -> Response:
    return await _list(page, "/batches", "Batches", [("id", "id"), ("endpoint", "endpoint"), ("status", "status"),
                                                      ("created_at_text", "created")], "/console/batches/", filters=())


async def batch(page: Page) -> Response:
    status, body = await page.api("GET", f"/batches/{page.request.path_params['item_id']}")
    if status != 200:
        return page.failed(status, body)
    return page.render("object.html", title=f"Batch {body.get('id')}", sections=[("Batch", body)], actions=[])


async def prompts(page: Page) -> Response:
    status, body = await page.api("GET", "/prompts")
    if status != 200:
        return page.failed(status, body)
    return page.render("table.html", title="Prompts", columns=[("prompt_id", "prompt"), ("version", "default version"), ("prompt", "text")],
                       rows=(body or {}).get("data") or [], link="/console/prompts/", following=None)


ROUTES = [
    ("/", home, ["GET"]),
    ("/responses", responses, ["GET"]), ("/responses/{item_id}", response, ["GET"]),
    ("/chat", chats, ["GET"]), ("/chat/{item_id}", chat, ["GET"]),
    ("/files", files, ["GET", "POST"]), ("/files/{item_id}", file, ["GET"]), ("/files/{item_id}/content", file_content, ["GET"]),
    ("/files/{item_id}/delete", file_delete, ["POST"]),
    ("/containers/{item_id}/files/{file_id}/content", container_file_content, ["GET"]),
    ("/vector_stores", vector_stores, ["GET", "POST"]), ("/vector_stores/{item_id}", vector_store, ["GET", "POST"]),
    ("/batches", batches, ["GET"]), ("/batches/{item_id}", batch, ["GET"]),
    ("/prompts", prompts, ["GET"]),
]
