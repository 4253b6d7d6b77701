"""More browsing pages: conversations (opened by id: the API lists none), a prompt's versions side
by side, a vector store's files attached and detached, and a background response's events in order."""

from __future__ import annotations


from starlette.responses import RedirectResponse, Response, StreamingResponse

from runtime.console.citations import citations
from runtime.console.page import SECURITY_HEADERS, Page

__all__ = ["ROUTES"]


async def conversations(page: Page) -> Response:
    wanted = page.request.query_params.get("id", "").strip()
    if wanted:
        return RedirectResponse(f"/console/conversations/{wanted}", 303, headers=SECURITY_HEADERS)
    return page.render("conversations.html")


async def conversation(page: Page) -> Response:
    conversation_id = page.request.path_params["item_id"]
    status, body = await page.api("GET", f"/conversations/{conversation_id}")
    if status != 200:
        return page.failed(status, body)
    _, items = await page.api("GET", f"/conversations/{conversation_id}/items?limit=100&order=asc")
    return page.render("conversation.html", conversation=body, items=(items or {}).get("data") or [], citations=citations)


async def prompt(page: Page) -> Response:
    prompt_id = page.request.path_params["item_id"]
    status, body = await page.api("GET", f"/prompts/{prompt_id}/versions")
    if status != 200:
        return page.failed(status, body)
    return page.render("prompt.html", prompt_id=prompt_id, versions=(body or {}).get("data") or [])


async def attach(page: Page) -> Response:
    store_id = page.request.path_params["item_id"]
    file_id = str((await page.request.form()).get("file_id") or "").strip()
    status, body = await page.api("POST", f"/vector_stores/{store_id}/files", {"file_id": file_id})
    if status != 200:
        return page.failed(status, body)
    return RedirectResponse(f"/console/vector_stores/{store_id}", 303, headers=SECURITY_HEADERS)


async def detach(page: Page) -> Response:
    store_id, file_id = page.request.path_params["item_id"], page.request.path_params["file_id"]
    status, body = await page.api("DELETE", f"/vector_stores/{store_id}/files/{file_id}")
    if status != 200:
        return page.failed(status, body)
    return RedirectResponse(f"/console/vector_stores/{store_id}", 303, headers=SECURITY_HEADERS)


async def events(page: Page) -> Response:
    """A background response's events, followed by the page's script as they are logged (the whole
    log when it has ended), each with the time it reached the page."""
    response_id = page.request.path_params["item_id"]
    status, body = await page.api("GET", f"/responses/{response_id}")
    if status != 200:
        return page.failed(status, body)
    if not body.get("background"):
        return page.render("error.html", status=404, status_code=404, message="Only a background response's events are kept.")
    return page.render("events.html", response=body)


async def follow(page: Page) -> Response:
    """`GET /v1/responses/{id}?stream=true` as the principal, passed on as it comes (the events page's script reads it)."""
    response_id = page.request.path_params["item_id"]
    answer = await page.console.context.loopback.stream("GET", f"/v1/responses/{response_id}?stream=true", None, page.session.principal)
    return StreamingResponse(answer.parts, answer.status, headers={**SECURITY_HEADERS, "x-accel-buffering": "no"},
                             media_type=answer.headers.get("content-type", "application/json"))


ROUTES = [
    ("/conversations", conversations, ["GET"]), ("/conversations/{item_id}", conversation, ["GET"]),
    ("/prompts/{item_id}", prompt, ["GET"]),
    ("/vector_stores/{item_id}/attach", attach, ["POST"]), ("/vector_stores/{item_id}/files/{file_id}/detach", detach, ["POST"]),
    ("/responses/{item_id}/events", events, ["GET"]), ("/api/responses/{item_id}/events", follow, ["GET"]),
]
