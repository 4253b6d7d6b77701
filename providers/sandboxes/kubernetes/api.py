"""The Kubernetes API, as much of it as the sandboxes use: JSON calls on pods over httpx2, with the
service account's bearer token and the cluster's CA.

The token is read from its file again every minute rather than once: a projected service account
token is rotated by the kubelet (about hourly), and a token read at start would expire under a
long-running server.
"""

from __future__ import annotations

import ssl
import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2

__all__ = ["ApiError", "Cluster", "check"]

_TOKEN_TTL_S = 60.0


class ApiError(RuntimeError):
    """The API answered an error status (its `Status` message kept)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"the Kubernetes API answered {status}: {message}")
        self.status = status


@dataclass
class Cluster:
    """Where the API is and how to prove who we are to it."""

    api_url: str
    token_file: Path | None
    ca_file: Path | None
    _token: str | None = field(default=None, repr=False)
    _read_at: float = field(default=-_TOKEN_TTL_S, repr=False)

    def token(self) -> str | None:
        if self.token_file is None:
            return None
        if time.monotonic() - self._read_at >= _TOKEN_TTL_S:
            self._token = self.token_file.read_text().strip()
            self._read_at = time.monotonic()
        return self._token

    def headers(self) -> dict[str, str]:
        token = self.token()
        return {"Authorization": f"Bearer {token}"} if token else {}

    def ssl_context(self) -> ssl.SSLContext | None:
        """The cluster's CA for an `https` API (None for plain `http`, a test's or a local proxy's)."""
        if not self.api_url.startswith("https:"):
            return None
        if self.ca_file is not None and not self.ca_file.is_file():
            raise RuntimeError(f"the Kubernetes sandboxes: the CA file {self.ca_file} is missing (set `ca_file` to the cluster's "
                               "CA, or to null to trust the system's CAs)")
        return ssl.create_default_context(cafile=str(self.ca_file) if self.ca_file else None)

    def client(self, timeout: float) -> httpx2.AsyncClient:
        """A client of the API. Not the stack's client factory: that one trusts only the public CAs, and
        the API's certificate is signed by the cluster's own."""
        context = self.ssl_context()
        return httpx2.AsyncClient(base_url=self.api_url.rstrip("/"), timeout=timeout, auth=_TokenAuth(self),
                                  verify=context if context is not None else True, trust_env=False)


class _TokenAuth(httpx2.Auth):
    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    async def async_auth_flow(self, request: httpx2.Request) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        request.headers.update(self.cluster.headers())
        yield request


async def check(response: httpx2.Response) -> Any:
    """The answer's JSON; raises `ApiError` on an error status, with the API's own message."""
    if response.status_code >= 400:
        await response.aread()
        try:
            message = str(response.json().get("message", response.text))
        except ValueError:
            message = response.text
        raise ApiError(response.status_code, message[:500])
    return response.json() if response.content else None
