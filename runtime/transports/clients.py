"""The one way the stack makes outbound HTTP clients: pooled httpx2 clients whose transport
records or replays exchanges when the plan says so."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, cast

from contract.spec import AddressGuard, HttpClientFactory, HttpTransportFactory

if TYPE_CHECKING:
    import httpx2

    from runtime.recording import RecordingMode

__all__ = ["http_client_factory", "http_transport_factory"]


def http_client_factory(mode: str, recordings_dir: Path) -> HttpClientFactory:
    """A factory of `httpx2.AsyncClient`s for providers, recording or replaying per `mode`."""

    def make(
        *,
        base_url: str,
        timeout: float,
        connect_timeout: float = 5.0,
        headers: Mapping[str, str] | None = None,
        max_connections: int = 256,
    ) -> httpx2.AsyncClient:
        import httpx2  # on first use: a stack with no remote provider never needs it

        transport = http_transport_factory(mode, recordings_dir)(max_connections=max_connections, connect_timeout=connect_timeout)
        return httpx2.AsyncClient(
            base_url=base_url,
            transport=transport,
            timeout=httpx2.Timeout(timeout, connect=connect_timeout),
            headers=dict(headers or {}),
        )

    return make


def http_transport_factory(mode: str, recordings_dir: Path) -> HttpTransportFactory:
    """A factory of pooled transports, wrapped to record or replay per `mode`."""

    def make(*, max_connections: int = 256, connect_timeout: float = 5.0,
             address_guard: AddressGuard | None = None) -> httpx2.AsyncBaseTransport:
        transport = _inner_transport(max_connections, connect_timeout, address_guard)
        if mode != "live":
            from runtime.recording import recording_transport

            transport = recording_transport(transport, cast("RecordingMode", mode), recordings_dir)
        return transport

    return make


TRANSPORT_ENV = "STACK_HTTP_TRANSPORT"


def _inner_transport(max_connections: int, connect_timeout: float, address_guard: AddressGuard | None) -> httpx2.AsyncBaseTransport:
    """Our pooled HTTP/1.1 transport (httptools), several times cheaper per request than
    httpx2's own; `STACK_HTTP_TRANSPORT=httpx2` falls back to httpx2's (HTTP/2, proxies), which
    cannot apply an address guard when it connects (URLs are still checked when requests arrive)."""
    if os.environ.get(TRANSPORT_ENV) == "httpx2":
        import httpx2

        limits = httpx2.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
        return httpx2.AsyncHTTPTransport(limits=limits, retries=0)
    from runtime.transports.fast import PooledTransport

    return PooledTransport(max_connections=max_connections, connect_timeout=connect_timeout, address_guard=address_guard)
