"""A request sent to the stack's own routes, in process, for a principal: how work done later on
a caller's behalf (a batch's requests) gets exactly what a live request of that caller gets: the
same checks, guardrails, tool loop, auth principal, quotas, metrics and logs. The runtime gives a
`Loopback` to every provider (`ProviderContext.loopback`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from contract.caller import Principal

__all__ = ["LOOPBACK", "Loopback", "LoopbackAnswer"]

LOOPBACK = "stack.loopback"
"""The ASGI scope extension of a loopback request: `{"principal": Principal | None}`. Only code in
the server's process can put it in a scope (an HTTP client cannot): the authentication layer takes
its principal as the request's."""


@dataclass(frozen=True)
class LoopbackAnswer:
    status: int
    headers: Mapping[str, str]
    """Lower-case names."""
    body: bytes


class Loopback(Protocol):
    async def __call__(self, method: str, path: str, body: bytes | None, principal: Principal | None) -> LoopbackAnswer:
        """The stack's answer to `method path` with the JSON `body`, as `principal` (None: with
        auth off, or as no one). Waits until the app is up."""
        ...

    def live(self) -> int:
        """Requests the server is answering now that are not its own loopback requests: the
        interactive load, which work sent through here gives way to."""
        ...
