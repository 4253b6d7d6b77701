"""Authentication: who is calling. One ASGI middleware of the app, so the server and the library
client check alike (the library client's requests go through the same app; there is no bypass).

run.yaml's `server.auth` lists the methods (builder/config.py `AuthConfig`); they are tried in
order, and the first that names a principal admits the request:

- `api_keys`: the bearer token's SHA-256 looked up among the configured keys' (the file may hold
  only hashes);
- `database_keys`: the same, among the keys `stack keys` keeps in the database (runtime.security.keys);
- `jwt`: a bearer token that is a JWT, its signature checked with a key from `jwks_url` (PyJWT's
  JWKS client, keys cached) or with `public_key`, and its issuer, audience and times (with
  `leeway_s` of clock skew); claims map to the principal and its attributes;
- `delegate`: the token sent to an HTTP endpoint that names the principal (answers cached briefly);
- `header`: a principal named by a trusted gateway in a request header.

A request no method admits is a 401 in OpenAI's shape with a `WWW-Authenticate` header. A verifier
that cannot answer (the JWKS endpoint or the delegate down) is a 503: never an open door. Health
and version stay open. The principal is in `scope["state"]["principal"]` and `contract.caller.current_principal()`;
what it may reach of other owners' objects, by the access policy (runtime.security.access), in
`contract.caller.granted_owners()`.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from builder.config import AuthConfig, DelegateAuthConfig, JwtConfig
from contract import fastjson
from contract.caller import CALLER, GRANTS, Grants, Principal
from contract.errors import APIError, error_body
from contract.loopback import LOOPBACK
from runtime.security.quotas import Quotas, meter_tokens, reset_meter

__all__ = ["AuthGuard", "Authenticator"]

log = logging.getLogger("stack")

OPEN_PATHS = frozenset({"/v1/health", "/v1/version", "/health", "/version"})
_REALM = 'Bearer realm="stack"'


class KeyStore(Protocol):
    """Keys kept elsewhere than run.yaml (runtime.security.keys.DatabaseKeys)."""

    async def principal(self, token: str) -> Principal | None: ...


class AccessRules(Protocol):
    """What widens isolation (runtime.security.access.AccessPolicy)."""

    async def grants(self, caller: Principal) -> Grants | None: ...


class AuthFailed(Exception):
    """No method admits the request: a 401."""

    def __init__(self, message: str, *, invalid_token: bool = True) -> None:
        super().__init__(message)
        self.message = message
        self.invalid_token = invalid_token


class VerifierDown(Exception):
    """A verifier could not answer: a 503 (the request is refused, not let in)."""


def key_hash(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


class _Jwt:
    def __init__(self, config: JwtConfig) -> None:
        import jwt

        self.config = config
        self._jwt = jwt
        self._jwks = (jwt.PyJWKClient(config.jwks_url, cache_keys=True, lifespan=config.keys_cache_s, timeout=config.timeout_s)
                      if config.jwks_url else None)
        # Verified tokens: a client sends the same token for many requests, and checking it (its
        # signature, a thread hop to the JWKS client) cost more than the rest of a proxied chat request.
        # Refused ones are not kept (`_verify` raises).
        self._verified = CachedAnswers(config.cache_s)

    async def principal(self, token: str, digest: str) -> Principal | None:
        """The principal of a valid `token` (whose SHA-256 is `digest`); AuthFailed for an invalid one."""
        kept = self._verified.kept(digest)
        if kept is not None:
            return kept[0]
        principal, expires = await self._verify(token)
        if self.config.cache_s > 0:  # never past the token's own expiry
            self._verified.keep(digest, principal, min(self.config.cache_s, expires - time.time()))
        return principal

    async def _verify(self, token: str) -> tuple[Principal, float]:
        jwt, config = self._jwt, self.config
        try:
            if self._jwks is not None:
                # PyJWKClient fetches with urllib (blocking): off the event loop; its cache makes it rare.
                key: Any = (await asyncio.to_thread(self._jwks.get_signing_key_from_jwt, token)).key
            else:
                key = config.public_key
            claims = jwt.decode(token, key, algorithms=config.algorithms, audience=config.audience, issuer=config.issuer,
                                leeway=config.leeway_s,
                                options={"require": ["exp"], "verify_aud": config.audience is not None,
                                         "verify_iss": config.issuer is not None})
        except jwt.PyJWKClientConnectionError as error:
            raise VerifierDown(f"the JWKS endpoint could not be reached ({error})") from None
        except (jwt.PyJWKClientError, jwt.InvalidTokenError) as error:
            raise AuthFailed(f"The bearer token was refused: {error}.") from None
        subject = claims.get(config.principal_claim)
        if not isinstance(subject, str) or not subject:
            raise AuthFailed(f"The bearer token has no '{config.principal_claim}' claim naming a principal.")
        attributes = {name: claims[claim] for name, claim in config.attribute_claims.items() if claim in claims}
        return Principal(subject, attributes, "jwt"), float(claims["exp"]) + config.leeway_s


class CachedAnswers:
    """A verifier's answers (a principal, or None for a refused token) kept for `ttl_s` by the
    token's hash; cleared when `size` tokens are held, so unknown tokens cannot grow it."""

    def __init__(self, ttl_s: float, size: int = 10_000) -> None:
        self.ttl_s = ttl_s
        self.size = size
        self._answers: dict[str, tuple[float, Principal | None]] = {}

    async def principal(self, token: str, ask: Callable[[str, str], Awaitable[Principal | None]]) -> Principal | None:
        """The cached answer for `token`, else `ask(token, its hash)`'s, then cached."""
        digest = key_hash(token)
        kept = self.kept(digest)
        if kept is not None:
            return kept[0]
        found = await ask(token, digest)
        self.keep(digest, found)
        return found

    def kept(self, digest: str) -> tuple[Principal | None] | None:
        """The answer kept for the token whose hash is `digest`, as a 1-tuple (a refusal kept is
        `(None,)`), or None when there is none."""
        cached = self._answers.get(digest)
        return (cached[1],) if cached is not None and cached[0] > time.monotonic() else None

    def keep(self, digest: str, found: Principal | None, ttl_s: float | None = None) -> None:
        """Keep `found` for `ttl_s` (the cache's own when None)."""
        if len(self._answers) >= self.size:
            self._answers.clear()
        self._answers[digest] = (time.monotonic() + (self.ttl_s if ttl_s is None else ttl_s), found)


class _Delegate:
    def __init__(self, config: DelegateAuthConfig) -> None:
        self.config = config
        self._answers = CachedAnswers(config.cache_s)
        self._client: Any = None

    async def principal(self, token: str) -> Principal | None:
        return await self._answers.principal(token, self._ask)

    async def _ask(self, token: str, _digest: str) -> Principal | None:
        import httpx2

        if self._client is None:
            self._client = httpx2.AsyncClient(timeout=self.config.timeout_s)
        try:
            answer = await self._client.post(self.config.url, json={"token": token})
        except httpx2.HTTPError as error:
            raise VerifierDown(f"the delegated check at {self.config.url} could not be reached ({type(error).__name__})") from None
        if answer.status_code in (401, 403):
            principal = None
        elif answer.status_code != 200:
            raise VerifierDown(f"the delegated check answered {answer.status_code}")
        else:
            try:
                body = answer.json()
                principal = Principal(str(body["principal"]), dict(body.get("attributes") or {}), "delegate")
            except (ValueError, KeyError, TypeError, AttributeError):
                raise VerifierDown("the delegated check's answer names no principal") from None
        return principal


class Authenticator:
    """The principal a request's headers stand for, by the configured methods in order."""

    def __init__(self, config: AuthConfig, database_keys: KeyStore | None = None) -> None:
        self.config = config
        self._keys = {(entry.key_sha256 or key_hash(entry.key or "")): Principal(entry.principal, dict(entry.attributes), "api_key")
                      for entry in config.api_keys}
        self._static = {id(principal) for principal in self._keys.values()}
        self._database_keys = database_keys
        self._jwt = _Jwt(config.jwt) if config.jwt is not None else None
        self._delegate = _Delegate(config.delegate) if config.delegate is not None else None
        self._known: dict[tuple[bytes, bytes], Principal] = {}
        """The principal of each `authorization` (or `x-api-key`) header value seen carrying one of
        run.yaml's keys, as the client sent it: a client sends the same header on every request, and
        reading it (a Headers object, the bearer scheme, a SHA-256) was half of what auth cost a
        request. Only configured keys land here (the keys are in run.yaml anyway), never database
        keys or tokens, whose revocation and expiry their own caches keep to."""

    async def principal_of(self, scope: Scope) -> Principal:
        """The principal of a request's ASGI scope (`principal`, with the header values already
        known to carry a configured key answered from memory)."""
        authorization = api_key = None
        for name, value in scope["headers"]:
            if name == b"authorization" and authorization is None:
                authorization = value
            elif name == b"x-api-key" and api_key is None:
                api_key = value
        # The header `principal` reads the key from: a bearer token, else x-api-key.
        scheme, _, token = (authorization or b"").partition(b" ")
        used: tuple[bytes, bytes] | None = None
        if authorization is not None and scheme.lower() == b"bearer" and token.strip():
            used = (b"a", authorization)
        elif api_key is not None:
            used = (b"x", api_key)
        if used is not None and (known := self._known.get(used)) is not None:
            return known
        principal = await self.principal(Headers(scope=scope))
        if used is not None and id(principal) in self._static and len(self._known) < _KNOWN_HEADERS:
            self._known[used] = principal
        return principal

    async def principal(self, headers: Headers) -> Principal:
        authorization = headers.get("authorization", "")
        scheme, _, token = authorization.partition(" ")
        token = token.strip() if scheme.lower() == "bearer" else ""
        if not token:  # Anthropic's clients send the key as x-api-key
            token = headers.get("x-api-key", "").strip()
        refusal: AuthFailed | None = None
        if token:
            digest = key_hash(token)
            principal = self._keys.get(digest)
            if principal is not None:
                return principal
            if self._database_keys is not None and not token.count(".") == 2:
                principal = await self._database_keys.principal(token)
                if principal is not None:
                    return principal
            if self._jwt is not None and token.count(".") == 2:
                try:
                    found = await self._jwt.principal(token, digest)
                except AuthFailed as failed:
                    refusal, found = failed, None
                if found is not None:
                    return found
            if self._delegate is not None:
                found = await self._delegate.principal(token)
                if found is not None:
                    return found
        gateway = self.config.header
        if gateway is not None and headers.get(gateway.name):
            attributes = {name: headers[header] for name, header in gateway.attribute_headers.items() if header in headers}
            return Principal(headers[gateway.name], attributes, "header")
        if refusal is not None:
            raise refusal
        if not token:
            raise AuthFailed("You didn't provide an API key. Send it as a bearer token (Authorization: Bearer KEY), or as x-api-key.", invalid_token=False)
        raise AuthFailed("Incorrect API key provided.")


_KNOWN_HEADERS = 4096  # header spellings of configured keys remembered (a bound, should a client vary its whitespace)

RESPONSE_HEADERS = "response_headers"
"""The key, in a request's ASGI `state`, of headers the response must carry (a quota's
`x-ratelimit-*`): the request guard adds them to the response's start."""


class AuthGuard:
    """Admits a request only with a principal (health and version, and CORS preflights, stay open)."""

    def __init__(self, app: ASGIApp, authenticator: Authenticator, open_paths: frozenset[str] = OPEN_PATHS,
                 quotas: Quotas | None = None, access: AccessRules | None = None) -> None:
        self.app = app
        self.authenticator = authenticator
        self.open_paths = open_paths
        self.quotas = quotas
        self.access = access

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind not in ("http", "websocket") or scope["path"] in self.open_paths or (kind == "http" and scope["method"] == "OPTIONS"):
            await self.app(scope, receive, send)
            return
        try:
            looped = scope.get("extensions", {}).get(LOOPBACK)  # a request of this process's own (a batch's), for its principal
            principal = looped["principal"] if looped is not None and looped["principal"] is not None else (
                await self.authenticator.principal_of(scope))
        except AuthFailed as failed:
            challenge = _REALM + (', error="invalid_token"' if failed.invalid_token else "")
            await _refuse(scope, receive, send, 401, error_body(failed.message, "invalid_request_error", None, "invalid_api_key"),
                          {"www-authenticate": challenge})
            return
        except VerifierDown as down:
            # The log says which verifier and why; the client, who may not be authenticated, is not
            # told where the server's identity services are.
            log.warning("authentication could not be checked: %s", down)
            await _refuse(scope, receive, send, 503, error_body(
                "Your credentials could not be checked right now: the service that checks them did not answer. Try again shortly.",
                "server_error", None, "auth_unavailable"), {"retry-after": "1"})
            return
        state = scope.setdefault("state", {})
        state["principal"] = principal
        spend = None
        if self.quotas is not None:
            try:
                limits = await self.quotas.admit(principal.id)
            except APIError as error:
                await _refuse(scope, receive, send, error.status, error.body(), dict(error.headers))
                return
            if limits:
                # Added to the response's start by the request guard (runtime.http.middleware), which
                # wraps `send` already: a wrapper of its own here cost a call for every message sent.
                state[RESPONSE_HEADERS] = limits
            spend = self.quotas.meter(principal.id)
        granted = GRANTS.set(await self.access.grants(principal)) if self.access is not None else None
        reset, metered = CALLER.set(principal), meter_tokens(spend)
        try:
            await self.app(scope, receive, send)
        finally:
            reset_meter(metered)
            CALLER.reset(reset)
            if granted is not None:
                GRANTS.reset(granted)


async def _refuse(scope: Scope, receive: Receive, send: Send, status: int, body: dict[str, Any], headers: dict[str, str]) -> None:
    if scope["type"] == "websocket":
        await receive()  # websocket.connect
        code = 1008 if status == 401 else 1013  # policy violation; try again later
        await send({"type": "websocket.close", "code": code, "reason": body["error"]["message"][:120]})
        return
    raw = fastjson.dumps(body)
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(raw)).encode()),
        *((name.encode(), value.encode()) for name, value in headers.items())]})
    await send({"type": "http.response.body", "body": raw})
