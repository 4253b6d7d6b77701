"""The console's session: a signed cookie (HttpOnly, SameSite=Strict, with an expiry) holding the
signed-in principal, and the CSRF token every form and state-changing call must carry.

The cookie is `payload.signature`: the payload (principal id and attributes, expiry, a nonce) in
URL-safe base64, signed with HMAC-SHA256 under a key kept in the state directory
(`console.key`, made on first use), so sessions outlive a restart and work on every worker. The
CSRF token is the HMAC of the session's nonce: a page of another origin can neither read it nor
make it."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contract.caller import Principal

__all__ = ["COOKIE", "Session", "SessionKeys"]

COOKIE = "stack_console"
LIFETIME_S = 12 * 3600


@dataclass(frozen=True)
class Session:
    principal: Principal | None
    nonce: str
    expires: int


class SessionKeys:
    def __init__(self, state_dir: Path) -> None:
        path = state_dir / "console.key"
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(descriptor, "wb") as sink:
                sink.write(secrets.token_bytes(32))
        self._key = path.read_bytes()

    def new(self, principal: Principal | None) -> tuple[Session, str]:
        """A new session and its cookie's value."""
        session = Session(principal, secrets.token_urlsafe(16), int(time.time()) + LIFETIME_S)
        payload = {"p": principal.id if principal else None, "a": dict(principal.attributes) if principal else {},
                   "m": principal.method if principal else None, "n": session.nonce, "e": session.expires}
        body = base64.urlsafe_b64encode(json.dumps(payload, separators=(",", ":")).encode()).decode()
        return session, f"{body}.{self._sign(body)}"

    def read(self, value: str | None) -> Session | None:
        """The session a cookie's value stands for; None when it is missing, forged or expired."""
        if not value or "." not in value:
            return None
        body, _, signature = value.partition(".")
        if not hmac.compare_digest(signature, self._sign(body)):
            return None
        try:
            payload: dict[str, Any] = json.loads(base64.urlsafe_b64decode(body.encode()))
        except ValueError:
            return None
        if int(payload.get("e") or 0) < time.time():
            return None
        principal = Principal(payload["p"], payload.get("a") or {}, payload.get("m") or "api_key") if payload.get("p") else None
        return Session(principal, str(payload["n"]), int(payload["e"]))

    def csrf(self, session: Session) -> str:
        return self._sign(f"csrf:{session.nonce}")

    def _sign(self, text: str) -> str:
        return base64.urlsafe_b64encode(hmac.new(self._key, text.encode(), hashlib.sha256).digest()).decode().rstrip("=")
