"""The console's session cookie and CSRF token."""

from __future__ import annotations

import stat
import time
from pathlib import Path

import pytest

from contract.caller import Principal
from runtime.console import session as sessions
from runtime.console.session import SessionKeys


def test_a_session_comes_back_from_its_cookie_with_its_principal(tmp_path: Path) -> None:
    keys = SessionKeys(tmp_path)
    made, cookie = keys.new(Principal("alice", {"team": "blue"}))
    read = keys.read(cookie)
    assert read is not None and read.principal == Principal("alice", {"team": "blue"}) and read.nonce == made.nonce
    assert stat.S_IMODE((tmp_path / "console.key").stat().st_mode) == 0o600
    assert SessionKeys(tmp_path).read(cookie) is not None  # the key outlives the process: a restart keeps sessions


@pytest.mark.parametrize("tamper", [
    lambda cookie: cookie[:-2] + ("AA" if not cookie.endswith("AA") else "BB"),  # the signature
    lambda cookie: "eyJwIjoiYm9iIn0" + cookie[cookie.index("."):],  # another payload under the same signature
    lambda cookie: cookie.replace(".", ""),
    lambda cookie: "",
])
def test_a_forged_cookie_is_no_session(tmp_path: Path, tamper: object) -> None:
    keys = SessionKeys(tmp_path)
    _, cookie = keys.new(Principal("alice"))
    assert keys.read(tamper(cookie)) is None  # type: ignore[operator]


def test_a_session_ends_at_its_expiry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    keys = SessionKeys(tmp_path)
    _, cookie = keys.new(Principal("alice"))
    monkeypatch.setattr(sessions.time, "time", lambda: time.time_ns() / 1e9 + sessions.LIFETIME_S + 1)
    assert keys.read(cookie) is None


def test_each_session_has_its_own_csrf_token_which_another_key_cannot_make(tmp_path: Path) -> None:
    keys = SessionKeys(tmp_path)
    first, _ = keys.new(Principal("alice"))
    second, _ = keys.new(Principal("alice"))
    assert keys.csrf(first) != keys.csrf(second)
    assert SessionKeys(tmp_path / "other").csrf(first) != keys.csrf(first)
