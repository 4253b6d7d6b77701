"""What a connection to an MCP server is made to (`Endpoint`), and how its failures are told
(`McpFailure`): the parts of the client that requests use before any connection, which load
without the `mcp` SDK and the HTTP stack."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any
from urllib.parse import urlsplit

__all__ = ["CONNECTION_FAILED", "Endpoint", "McpFailure"]

CONNECTION_FAILED = 424  # what OpenAI reports for a server it cannot reach (Failed Dependency)


@dataclass(frozen=True)
class Endpoint:
    """Where one MCP server is and what to send it."""

    label: str
    url: str
    headers: tuple[tuple[str, str], ...] = ()
    trusted: bool = False
    """Configured by the operator (reached without the network guard)."""

    @property
    def key(self) -> str:
        """Identifies the server and the credentials used with it (what it lists may depend on them)."""
        material = "\n".join([self.url, *(f"{name.lower()}: {value}" for name, value in sorted(self.headers))])
        return hashlib.sha256(material.encode()).hexdigest()

    @property
    def sse(self) -> bool:
        return urlsplit(self.url).path.rstrip("/").endswith("/sse")


class McpFailure(Exception):
    """A failure talking to an MCP server, as the `error` of its item (an `mcp_call.error`);
    `detail` says more than an HTTP status does (why a server could not be reached)."""

    def __init__(self, error: dict[str, Any], detail: str | None = None) -> None:
        super().__init__(error["message"])
        self.error = error
        self.detail = detail

    @property
    def message(self) -> str:
        return str(self.error["message"])

    @property
    def status_text(self) -> str:
        """`Http status code: 401 (Unauthorized)`, as OpenAI words a listing's failure."""
        if self.error["type"] != "http_error":
            return self.message
        code = int(self.error["code"])
        try:
            phrase = HTTPStatus(code).phrase
        except ValueError:
            phrase = "Error"
        return f"Http status code: {code} ({phrase})" + (f". {self.detail}" if self.detail else "")
