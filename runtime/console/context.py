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
