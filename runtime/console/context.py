"""What the console needs of the server, given to it when the app is built."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contract.caller import Principal

__all__ = ["ConsoleContext"]


@dataclass(frozen=True)
class ConsoleContext:
    """What the console needs of the server: its way to the API (`runtime.http.loopback.AppLoopback`),
    how an API key signs in (None: auth is off, everyone is no one), where its session key lives,
    whether it is served over TLS (its cookie is then `Secure`)."""

    loopback: Any
    authenticate: Callable[[str], Awaitable[Principal | None]] | None
    state_dir: Path
    secure: bool = False
    admin: Callable[[Principal | None], Awaitable[bool]] | None = None
    """Whether a principal sees the operator's page: auth off, or an access policy lets it read
    every owner's objects. None: nobody does."""
    keys: Any = None
    """The database keys (`runtime.security.keys.DatabaseKeys`) when run.yaml turns them on."""
    metrics: Callable[[], Awaitable[bytes]] | None = None
    """The server's Prometheus exposition, when metrics are on."""
    usage: Any = None
    """Usage over time (`runtime.security.usage.UsageLedger`) when run.yaml turns it on."""
