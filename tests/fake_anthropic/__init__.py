"""A fake, deterministic Anthropic Messages API upstream for tests: a real HTTP server on 127.0.0.1.

    with running_fake_anthropic() as upstream:
        ...  # a provider with base_url=upstream.url; upstream.bodies() is what it was sent

It checks requests as Anthropic does (alternating roles, tool results after their calls, thinking
blocks handed back with valid signatures, at most 4 cache breakpoints...) and answers as the
directives of `fake_anthropic.answers` say."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from fake_anthropic.answers import DEFAULT_TEXT, RETRY_AFTER_S, THINKING_TEXT
from fake_anthropic.app import RecordedRequest, create_app
from fake_anthropic.checks import MODELS, sign
from fake_upstream.server import bind_socket, serving

__all__ = ["DEFAULT_TEXT", "MODELS", "RETRY_AFTER_S", "THINKING_TEXT", "FakeAnthropic", "RecordedRequest", "create_app",
           "running_fake_anthropic", "sign"]


@dataclass
class FakeAnthropic:
    host: str
    port: int
    api_key: str | None = None
    requests: list[RecordedRequest] = field(default_factory=list)

    @property
    def url(self) -> str:
        """The base URL (the Messages API's paths follow it: /v1/messages)."""
        return f"http://{self.host}:{self.port}"

    def bodies(self, path: str = "/v1/messages") -> list[Any]:
        """The JSON bodies received at `path`, oldest first."""
        return [request.body for request in self.requests if request.path == path]


@contextmanager
def running_fake_anthropic(api_key: str | None = None, host: str = "127.0.0.1") -> Iterator[FakeAnthropic]:
    """Serve the fake on a free port in a background thread until the block ends."""
    sock = bind_socket(host, 0)
    upstream = FakeAnthropic(host, sock.getsockname()[1], api_key)
    with serving(create_app(api_key, upstream.requests), sock, "fake-anthropic"):
        yield upstream
