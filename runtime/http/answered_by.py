"""`x-stack-deployment`: the deployment that answered a request for a model with several
(runtime.apis.inference.deployments), as `provider_id/model`.

A layer of its own, put in the app only when run.yaml has such a model: a stack without one pays
nothing for it. The deployments layer notes the deployment in a context variable this layer set
for the request (the call runs in the request's task, a stream's first chunk too, so the note is
there when the response starts)."""

from __future__ import annotations

from contextvars import ContextVar

from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["AnsweredBy", "note_deployment"]

_ANSWERED: ContextVar[list[str] | None] = ContextVar("answered_by", default=None)


def note_deployment(name: str) -> None:
    """The deployment that answers the request in hand (the last noted is named)."""
    held = _ANSWERED.get()
    if held is not None:
        held.append(name)


class AnsweredBy:
    """See the module's docstring."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        held: list[str] = []
        token = _ANSWERED.set(held)

        async def named(message: Message) -> None:
            if held and message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", ()), (b"x-stack-deployment", held[-1].encode())]
            await send(message)

        try:
            await self.app(scope, receive, named)
        finally:
            _ANSWERED.reset(token)
