"""What an inference provider implements. Bodies are OpenAI wire format, as bytes or dicts."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Mapping
from contextvars import ContextVar, Token
from dataclasses import dataclass

from contract import fastjson
from typing import Any, Literal, Protocol, runtime_checkable

__all__ = ["InferenceProvider", "MessagesPassthrough", "MessagesTokenCount", "TextCompletionProvider", "UpstreamModel", "UpstreamRequest",
           "client_beta", "client_betas"]


@dataclass(frozen=True)
class UpstreamRequest:
    """A request for one provider: the client's body with `model` set to the provider's model id."""

    body: Mapping[str, Any]
    raw: bytes | None = None
    """The body already serialised, when the client's bytes can be forwarded untouched."""

    def payload(self) -> bytes:
        if self.raw is not None:
            return self.raw
        return fastjson.dumps(self.body)


@dataclass(frozen=True)
class UpstreamModel:
    """A model a provider reports serving."""

    id: str
    created: int = 0
    owned_by: str = ""
    model_type: Literal["llm", "embedding"] = "llm"
    dimensions: int | None = None
    """An embedding model's vector size, when the provider knows it (listed by /v1/models)."""


@runtime_checkable
class InferenceProvider(Protocol):
    """An OpenAI-compatible model server, or anything that answers like one.

    Errors are raised as `contract.errors.APIError`s: an upstream's own error keeps its status
    and message (`UpstreamError`); an unreachable upstream is a 502 naming the provider and URL.
    """

    async def chat_completion(self, request: UpstreamRequest) -> bytes:
        """The ChatCompletion JSON for a non-streamed request."""
        ...

    def stream_chat_completion(self, request: UpstreamRequest) -> AsyncIterator[bytes]:
        """The data payload of each ChatCompletionChunk event, without the final `[DONE]`."""
        ...

    async def embeddings(self, request: UpstreamRequest) -> bytes:
        """The embeddings list JSON."""
        ...

    async def list_models(self) -> list[UpstreamModel]:
        ...


@runtime_checkable
class TextCompletionProvider(Protocol):
    """A provider that also serves the legacy `/v1/completions` API (a prompt in, text out).

    Optional: the stack answers a model whose provider lacks these methods with a 400
    naming the model. Errors as for `InferenceProvider`."""

    async def completion(self, request: UpstreamRequest) -> bytes:
        """The Completion JSON (`object: text_completion`) for a non-streamed request."""
        ...

    def stream_completion(self, request: UpstreamRequest) -> AsyncIterator[bytes]:
        """The data payload of each streamed Completion event, without the final `[DONE]`."""
        ...


@runtime_checkable
class MessagesPassthrough(Protocol):
    """A provider whose upstream speaks Anthropic's Messages API, and takes a Messages request as
    it is (`POST /v1/messages` of a model it serves is then forwarded, not translated to chat).

    Optional: the messages API translates the request of a model whose provider lacks these
    methods. Bodies are bytes both ways, untouched; errors are `APIError`s with the upstream's
    status and Anthropic's error type (`error_type`: a 529 stays a 529 `overloaded_error`). The
    client's `anthropic-beta` flags (`client_betas()`) go with the request, as the body may use
    what they turn on (`context_management`, `mcp_servers`)."""

    async def messages(self, body: bytes) -> bytes:
        """The upstream's `Message` JSON for a non-streamed request."""
        ...

    def stream_messages(self, body: bytes) -> AsyncIterator[bytes]:
        """The upstream's server-sent events for a streamed request, one whole event (its
        `event:` and `data:` lines and the blank line) a piece."""
        ...


@runtime_checkable
class MessagesTokenCount(Protocol):
    """A `MessagesPassthrough` provider whose upstream also counts a request's tokens (Anthropic's
    `POST /v1/messages/count_tokens`). Optional: without it a count is a one-token completion."""

    async def count_message_tokens(self, body: bytes) -> bytes:
        """The upstream's `{"input_tokens": N}` for a `count_tokens` request (a Messages request
        without `max_tokens`)."""
        ...


_BETAS: ContextVar[tuple[str, ...]] = ContextVar("anthropic_client_betas", default=())
_FLAG = re.compile(r"[A-Za-z0-9._-]{1,128}")


class client_beta:  # noqa: N801  # used as a function: `with client_beta(header):`
    """While the `with` block runs, the flags of the `anthropic-beta` header of the Messages
    request being answered (a comma-separated list; anything not shaped like a flag is left out)
    are `client_betas()`, for a `MessagesPassthrough` provider to send on. A class, not a
    generator function: it is on every Messages request, and without the header it does nothing."""

    __slots__ = ("_flags", "_token")

    def __init__(self, header: str | None) -> None:
        self._flags = tuple(flag for flag in (part.strip() for part in header.split(",")) if _FLAG.fullmatch(flag)) if header else ()
        self._token: Token[tuple[str, ...]] | None = None

    def __enter__(self) -> None:
        if self._flags:
            self._token = _BETAS.set(self._flags)

    def __exit__(self, *exc_info: object) -> None:
        if self._token is not None:
            _BETAS.reset(self._token)


def client_betas() -> tuple[str, ...]:
    """The client's `anthropic-beta` flags for the request being answered (none outside one)."""
    return _BETAS.get()
