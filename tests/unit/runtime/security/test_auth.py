"""runtime.security.auth's JWT method: a verified token is admitted again without its signature checked anew,
for `jwt.cache_s` and never past its expiry; invalid tokens are checked (and refused) every time."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any

import jwt
import pytest
from starlette.datastructures import Headers

from builder.config import AuthConfig
from runtime.security import auth
from runtime.security.auth import AuthFailed, Authenticator
from contract.caller import Principal

SECRET = "a-shared-secret-of-thirty-two-bytes!"


def authenticator(**jwt_config: Any) -> Authenticator:
    return Authenticator(AuthConfig.model_validate({"jwt": {"public_key": SECRET, "algorithms": ["HS256"], "leeway_s": 0, **jwt_config}}))


def bearer(token: str) -> Headers:
    return Headers({"authorization": f"Bearer {token}"})


def token(subject: str = "frank", expires_in: float = 60, secret: str = SECRET) -> str:
    return jwt.encode({"sub": subject, "exp": int(time.time() + expires_in)}, secret, algorithm="HS256")


@pytest.fixture
def decodes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The tokens whose signature and claims are checked (PyJWT's `decode` still does the check)."""
    checked: list[str] = []
    real = jwt.decode

    def counted(encoded: str, *args: Any, **kwargs: Any) -> Any:
        checked.append(encoded)
        return real(encoded, *args, **kwargs)

    monkeypatch.setattr(jwt, "decode", counted)
    return checked


def principal(check: Authenticator, encoded: str) -> Principal:
    return asyncio.run(check.principal(bearer(encoded)))


def test_a_verified_token_is_admitted_again_without_its_signature_checked_anew(decodes: list[str]) -> None:
    check, encoded = authenticator(), token()
    assert [principal(check, encoded).id for _ in range(3)] == ["frank"] * 3
    assert decodes == [encoded]
    other = token("grace")
    assert principal(check, other).id == "grace"  # another token is its own entry
    assert decodes == [encoded, other]


def test_with_cache_s_zero_every_request_checks_the_token(decodes: list[str]) -> None:
    check, encoded = authenticator(cache_s=0), token()
    for _ in range(3):
        assert principal(check, encoded).id == "frank"
    assert decodes == [encoded] * 3


def test_a_kept_token_is_checked_again_once_cache_s_has_passed(decodes: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    check, encoded = authenticator(cache_s=30), token(expires_in=3600)
    principal(check, encoded)
    pass_time(monkeypatch, 31)
    principal(check, encoded)
    assert decodes == [encoded, encoded]


def test_a_kept_token_is_refused_once_it_has_expired(monkeypatch: pytest.MonkeyPatch) -> None:
    check, encoded = authenticator(cache_s=3600), token(expires_in=5)
    assert principal(check, encoded).id == "frank"
    later = time.time() + 10  # past its exp, well within cache_s
    pass_time(monkeypatch, 10)
    monkeypatch.setattr(jwt.api_jwt, "datetime", _clock_at(later), raising=False)
    with pytest.raises(AuthFailed, match="expired"):
        principal(check, encoded)


def test_an_invalid_token_is_checked_and_refused_every_time(decodes: list[str]) -> None:
    check, forged = authenticator(), token(secret="another-secret-of-thirty-two-bytes!!")
    for _ in range(2):
        with pytest.raises(AuthFailed, match="Signature verification failed"):
            principal(check, forged)
    assert decodes == [forged, forged]


def pass_time(monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    """runtime.security.auth's clocks (the wall clock and the one its caches count on), `seconds` later."""
    wall, steady = time.time() + seconds, time.monotonic() + seconds
    monkeypatch.setattr(auth, "time", SimpleNamespace(time=lambda: wall, monotonic=lambda: steady))


def _clock_at(now: float) -> Any:
    """PyJWT's `datetime`, with `now()` at `now` (it checks `exp` against its own clock)."""
    import datetime as real

    class Clock(real.datetime):
        @classmethod
        def now(cls, tz: Any = None) -> Any:
            return real.datetime.fromtimestamp(now, tz)

    return Clock


def test_anthropics_x_api_key_is_admitted_as_a_bearer_token_is() -> None:
    """Claude Code and the anthropic SDKs send the key as x-api-key (issue 46)."""
    keys = Authenticator(AuthConfig.model_validate({"api_keys": [{"key": "sk-one-0001", "principal": "ann"}]}))
    assert asyncio.run(keys.principal(Headers({"x-api-key": "sk-one-0001"}))).id == "ann"
    assert asyncio.run(keys.principal(Headers({"authorization": "Bearer sk-one-0001", "x-api-key": "other"}))).id == "ann"  # the bearer first
    with pytest.raises(AuthFailed):
        asyncio.run(keys.principal(Headers({"x-api-key": "sk-two-0002"})))


def scope_of(*headers: tuple[str, str]) -> dict[str, Any]:
    return {"type": "http", "headers": [(name.encode(), value.encode()) for name, value in headers]}


async def admitted(keys: Authenticator, *headers: tuple[str, str]) -> str | None:
    try:
        return (await keys.principal_of(scope_of(*headers))).id
    except AuthFailed:
        return None


@pytest.mark.parametrize("headers, expected", [
    ((("authorization", "Bearer sk-one-0001"),), "ann"),
    ((("x-api-key", "sk-one-0001"),), "ann"),
    ((("authorization", "Basic c2stb25lLTAwMDE="), ("x-api-key", "sk-one-0001")), "ann"),  # not a bearer: x-api-key is read
    ((("authorization", "Basic c2stb25lLTAwMDE="),), None),
    ((("authorization", "Bearer sk-one-0001"), ("x-api-key", "sk-two-0002")), "ann"),  # the bearer first
    ((("authorization", "Bearer  "), ("x-api-key", "sk-one-0001")), "ann"),
    ((("authorization", "bearer sk-one-0001"),), "ann"),
    ((("authorization", "Bearer sk-two-0002"),), None),
    ((), None),
])
def test_a_scopes_principal_is_the_headers_and_a_remembered_one_never_another_headers(
        headers: tuple[tuple[str, str], ...], expected: str | None) -> None:
    keys = Authenticator(AuthConfig.model_validate({"api_keys": [{"key": "sk-one-0001", "principal": "ann"}]}))

    async def twice() -> None:
        for header_set in (headers, headers):  # the second answered from memory, when it can be
            assert await admitted(keys, *header_set) == expected
        # What was remembered for one header never admits a request that reads another.
        assert await admitted(keys, ("authorization", "Basic c2stb25lLTAwMDE=")) is None
        assert await admitted(keys, ("x-api-key", "sk-two-0002"), ("authorization", "Basic c2stb25lLTAwMDE=")) is None

    asyncio.run(twice())


def test_only_configured_keys_are_remembered_never_a_token(decodes: list[str]) -> None:
    keys = Authenticator(AuthConfig.model_validate({"api_keys": [{"key": "sk-one-0001", "principal": "ann"}],
                                                    "jwt": {"public_key": SECRET, "algorithms": ["HS256"], "leeway_s": 0, "cache_s": 0}}))
    encoded = token()
    for _ in range(2):
        assert asyncio.run(keys.principal_of(scope_of(("authorization", f"Bearer {encoded}")))).id == "frank"
    assert len(decodes) == 2  # checked each time (cache_s 0): not answered from the configured keys' memory
    assert list(keys._known) == []
    asyncio.run(keys.principal_of(scope_of(("authorization", "Bearer sk-one-0001"))))
    assert list(keys._known) == [(b"a", b"Bearer sk-one-0001")]
