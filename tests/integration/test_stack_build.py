"""`stack build --venv` end to end: a virtual environment built from a distribution's run.yaml,
with nothing but what requirements.txt names, starts that run.yaml with launch.sh and serves it.

Slow: each builds a real virtual environment from the package index (about a minute each with
pip's cache warm, as it is after this project's own install; llama.cpp compiles once otherwise).
They run in the default suite all the same: the build is the design card's first use.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import pytest

from runtime.testing.targets import free_port
from support.postgres import fresh_database

pytestmark = pytest.mark.slow

CHECKOUT = Path(__file__).resolve().parents[2]


def _build(distribution: str, directory: Path) -> tuple[Path, Path]:
    """`stack build --config DISTRIBUTION --output OUT --venv VENV`, as a user types it."""
    out, venv = directory / "out", directory / "venv"
    env = {key: value for key, value in os.environ.items() if not key.startswith(("STACK_", "OPENAI_", "VLLM_", "OLLAMA_", "TAVILY_"))}
    done = subprocess.run([sys.executable, "-m", "runtime.cli", "build", "--config", distribution, "--output", str(out), "--venv", str(venv)],
                          env=env, capture_output=True, text=True, timeout=1200, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"server: stack 0.1.0 from the checkout {CHECKOUT}, as a wheel built now" in done.stdout
    # The venv holds the server's wheel, not this checkout: what it runs is what a deployment gets.
    located = subprocess.run([str(venv / "bin" / "python"), "-c", "import runtime, contract; print(runtime.__file__)"],
                             capture_output=True, text=True, check=True, cwd=directory)
    assert located.stdout.startswith(str(venv)), located.stdout
    return out, venv


@contextmanager
def _launched(out: Path, port: int, env: Mapping[str, str]) -> Iterator[str]:
    """`out/launch.sh --port PORT` with only `env` (and PATH, HOME); yields its /v1 URL once it is healthy."""
    clean = {"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/tmp"), **env}
    log = out / "launch.log"
    with log.open("wb") as sink:
        process = subprocess.Popen([str(out / "launch.sh"), "--port", str(port)], env=clean, stdout=sink, stderr=subprocess.STDOUT,
                                   cwd="/", start_new_session=True)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert process.poll() is None, log.read_text()[-3000:]
            try:
                urllib.request.urlopen(f"{url}/health", timeout=2)
                break
            except urllib.error.HTTPError:
                break  # it answers (degraded: an upstream it cannot reach is its own business)
            except OSError:
                time.sleep(0.3)
        else:
            raise AssertionError("launch.sh did not serve within 120 s:\n" + log.read_text()[-3000:])
        yield url
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        assert process.wait(timeout=60) == 0, log.read_text()[-3000:]


def _health(url: str) -> dict:
    """/v1/health's body, whether it is 200 (ok) or 503 (degraded: an upstream here is unreachable)."""
    try:
        return _get(f"{url}/health")
    except urllib.error.HTTPError as error:
        return json.loads(error.read())


def _get(url: str, token: str | None = None) -> dict:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.loads(answer.read())


def test_a_venv_built_from_the_starter_serves_the_starter_with_its_model(tmp_path: Path) -> None:
    out, venv = _build("starter", tmp_path)
    with _launched(out, free_port(), {"STACK_STATE_DIR": str(tmp_path / "state")}) as url:
        models = [model["id"] for model in _get(f"{url}/models")["data"]]
        assert "local/smollm2-135m-instruct" in models and "local-embeddings/wordllama-l2-supercat" in models
        body = json.dumps({"model": "local/smollm2-135m-instruct", "max_tokens": 8, "messages": [{"role": "user", "content": "Hi"}]})
        request = urllib.request.Request(f"{url}/chat/completions", body.encode(), {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=120) as answer:
            completion = json.loads(answer.read())
        assert completion["choices"][0]["message"]["content"]


@pytest.mark.postgres
def test_a_venv_built_from_the_replicas_distribution_serves_it_on_postgres_and_redis(tmp_path: Path) -> None:
    """Built with none of the deployment's settings (its reasoning key is read where it runs), then
    started as compose.yaml starts it: PostgreSQL, Redis, auth with keys in the database, 2 workers."""
    out, venv = _build("replicas", tmp_path)
    with fresh_database() as dsn:
        env = {"STACK_STATE_DIR": str(tmp_path / "state"), "STACK_POSTGRES_DSN": dsn, "STACK_REDIS_URL": "redis://127.0.0.1:6379/0",
               "STACK_REASONING_KEY": base64.b64encode(os.urandom(32)).decode(), "OPENAI_API_KEY": "sk-unused",
               "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}
        created = subprocess.run([str(venv / "bin" / "stack"), "keys", "create", "--config", str(out / "run.yaml"), "--principal", "alice"],
                                 env={"PATH": "/usr/bin:/bin", **env}, capture_output=True, text=True, timeout=60, check=False)
        assert created.returncode == 0, created.stderr
        key = json.loads(created.stdout)["key"]
        with _launched(out, free_port(), env) as url:
            health = _health(url)
            assert health["storage"]["shared"]["status"] == "ok" and health["storage"]["shared"]["dialect"] == "postgresql"
            with pytest.raises(urllib.error.HTTPError) as refused:
                _get(f"{url}/conversations/conv_none")
            assert refused.value.code == 401
            with pytest.raises(urllib.error.HTTPError) as missing:
                _get(f"{url}/conversations/conv_none", key)
            assert missing.value.code == 404  # admitted by the key kept in PostgreSQL; the conversation is not there
