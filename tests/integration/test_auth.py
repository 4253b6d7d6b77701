"""Authentication (issue 12, item 1), through the openai SDK in server and library modes: API keys
(hashed in run.yaml), JWTs checked against a JWKS endpoint served here (keys made in the test) or a
static key, a trusted gateway header, and a check delegated to a local endpoint; 401 in OpenAI's
shape with WWW-Authenticate, 503 (never an open door) when a verifier is down, health open."""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx2 as httpx
import jwt
import openai
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from fake_upstream.server import running_fake_upstream
from support.live_stack import run_yaml, served

ALICE_KEY = "sk-alice-0123456789"
BOB_KEY = "sk-bob-0123456789"


class Endpoints(BaseHTTPRequestHandler):
    """GET /jwks: the keys; POST /check: the delegated check (token "good-opaque" is carol)."""

    jwks: dict[str, Any] = {"keys": []}
    checks: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
        self._answer(200, self.jwks)

    def do_POST(self) -> None:  # noqa: N802
        token = json.loads(self.rfile.read(int(self.headers["content-length"])))["token"]
        self.checks.append(token)
        if token == "good-opaque":
            self._answer(200, {"principal": "carol", "attributes": {"team": "c"}})
        else:
            self._answer(401, {"error": "no"})

    def _answer(self, status: int, body: Any) -> None:
        raw = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *_: Any) -> None:
        pass


@contextmanager
def endpoints() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Endpoints)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


PRIVATE = rsa.generate_private_key(public_exponent=65537, key_size=2048)
JWK = {**json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(PRIVATE.public_key())), "kid": "k1", "use": "sig", "alg": "RS256"}


def token(**claims: Any) -> str:
    now = int(time.time())
    body = {"sub": "dave", "iss": "https://idp.test", "aud": "stack", "iat": now, "exp": now + 300, "org": "d", **claims}
    return jwt.encode(body, PRIVATE, algorithm="RS256", headers={"kid": "k1"})


def auth_yaml(base: str) -> str:
    alice_hash = hashlib.sha256(ALICE_KEY.encode()).hexdigest()
    return f"""server:
  auth:
    api_keys:
      - {{principal: alice, key_sha256: "{alice_hash}", attributes: {{team: a}}}}
      - {{principal: bob, key: "{BOB_KEY}"}}
    jwt: {{jwks_url: "{base}/jwks", issuer: "https://idp.test", audience: stack, attribute_claims: {{team: org}}}}
    delegate: {{url: "{base}/check"}}
    header: {{name: x-forwarded-user}}
"""


@pytest.fixture(scope="module", params=["server", "library"])
def stack(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[openai.OpenAI, str]]:
    Endpoints.jwks = {"keys": [JWK]}
    with running_fake_upstream() as upstream, endpoints() as base:
        path = run_yaml(tmp_path_factory.mktemp("auth"), upstream.base_url, name="auth")
        path.write_text(path.read_text() + auth_yaml(base))
        with served(request.param, path) as client:
            yield client, base


def as_(client: openai.OpenAI, key: str, **headers: str) -> openai.OpenAI:
    return client.with_options(api_key=key, default_headers=headers)


def test_a_configured_api_key_is_admitted_and_others_are_a_401_in_openais_shape(stack: tuple[openai.OpenAI, str]) -> None:
    client, _ = stack
    for key in (ALICE_KEY, BOB_KEY):
        assert as_(client, key).responses.create(model="fake-model", input="[tokens:1] hi").output_text == "tok1"
    with pytest.raises(openai.AuthenticationError) as refused:
        as_(client, "sk-wrong-0123456789").models.list()
    assert refused.value.status_code == 401 and refused.value.body["code"] == "invalid_api_key"  # type: ignore[index]
    assert refused.value.response.headers["www-authenticate"].startswith('Bearer realm="stack"')


def test_health_and_version_stay_open(stack: tuple[openai.OpenAI, str]) -> None:
    client, _ = stack
    anonymous = as_(client, "")
    assert anonymous.get("/health", cast_to=httpx.Response).status_code == 200
    assert anonymous.get("/version", cast_to=httpx.Response).status_code == 200
    with pytest.raises(openai.AuthenticationError) as refused:
        anonymous.get("/providers", cast_to=httpx.Response)
    assert "didn't provide" in refused.value.message or "Incorrect" in refused.value.message


def test_a_jwt_from_the_jwks_endpoint_is_admitted_and_bad_ones_refused(stack: tuple[openai.OpenAI, str]) -> None:
    client, _ = stack
    assert as_(client, token()).models.list().data
    for bad in (token(exp=int(time.time()) - 3600), token(aud="other"), token(iss="https://evil.test"),
                jwt.encode({"sub": "x", "exp": int(time.time()) + 60}, "a-shared-secret-that-is-long-enough", algorithm="HS256")):
        with pytest.raises(openai.AuthenticationError) as refused:
            as_(client, bad).models.list()
        assert 'error="invalid_token"' in refused.value.response.headers["www-authenticate"]


def test_a_token_the_delegate_vouches_for_is_admitted(stack: tuple[openai.OpenAI, str]) -> None:
    client, _ = stack
    assert as_(client, "good-opaque").models.list().data
    with pytest.raises(openai.AuthenticationError):
        as_(client, "bad-opaque").models.list()


def test_a_trusted_gateway_header_names_the_principal(stack: tuple[openai.OpenAI, str]) -> None:
    client, _ = stack
    assert as_(client, "gateway-ignored", **{"x-forwarded-user": "erin"}).models.list().data


def test_a_verifier_that_is_down_refuses_with_a_503_never_an_open_door(tmp_path: Path) -> None:
    with running_fake_upstream() as upstream:
        with endpoints() as base:
            pass  # stopped: nothing answers at its address now
        path = run_yaml(tmp_path, upstream.base_url, name="auth-down")
        path.write_text(path.read_text() + f"""server:
  auth:
    jwt: {{jwks_url: "{base}/jwks", timeout_s: 1}}
    delegate: {{url: "{base}/check", timeout_s: 1}}
""")
        with served("library", path) as client:
            for credential in (token(), "opaque"):
                with pytest.raises(openai.APIStatusError) as refused:
                    as_(client, credential).models.list()
                assert refused.value.status_code == 503 and refused.value.body["code"] == "auth_unavailable"  # type: ignore[index]
                assert base not in refused.value.message and "127.0.0.1" not in refused.value.message  # where it is stays in the log


def test_a_static_key_checks_jwts_without_a_jwks_endpoint(tmp_path: Path) -> None:
    secret = "a-shared-secret-of-thirty-two-bytes!"
    with running_fake_upstream() as upstream:
        path = run_yaml(tmp_path, upstream.base_url, name="auth-static")
        path.write_text(path.read_text() + f"""server:
  auth:
    jwt: {{public_key: "{secret}", algorithms: [HS256]}}
""")
        with served("library", path) as client:
            good = jwt.encode({"sub": "frank", "exp": int(time.time()) + 60}, secret, algorithm="HS256")
            assert as_(client, good).models.list().data
            with pytest.raises(openai.AuthenticationError):
                as_(client, jwt.encode({"sub": "frank"}, secret, algorithm="HS256")).models.list()  # no expiry: refused


def test_a_websocket_without_credentials_is_refused(tmp_path: Path) -> None:
    """Server mode only: the library client has no WebSocket transport (test_responses_websocket.py)."""
    with running_fake_upstream() as upstream, endpoints() as base:
        path = run_yaml(tmp_path, upstream.base_url, name="auth-ws")
        path.write_text(path.read_text() + auth_yaml(base))
        with served("server", path) as client:
            with as_(client, ALICE_KEY).responses.connect() as connection:
                connection.response.create(model="fake-model", input="[tokens:1] hi")
                while connection.recv().type != "response.completed":
                    pass
            with pytest.raises(Exception) as refused:  # the handshake is refused: the SDK raises the websockets error
                with as_(client, "sk-wrong-0123456789").responses.connect(max_retries=0) as connection:
                    connection.response.create(model="fake-model", input="hi")
                    connection.recv()
    assert "403" in str(refused.value) or "1008" in str(refused.value)
