"""`stack run` as users start it: the starter distribution, TLS, CORS, and shutdown."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx2
import openai
import pytest

from runtime.testing.targets import free_port, running_server


def wait_healthy(url: str, process: subprocess.Popen[str], verify: object = True) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()[0]
        try:
            if httpx2.get(url, verify=verify, timeout=1).status_code == 200:  # type: ignore[arg-type]
                return
        except httpx2.HTTPError:
            time.sleep(0.05)
    pytest.fail(f"{url} did not answer")


def test_starter_starts_with_no_keys_and_says_what_is_active(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.endswith(("_API_KEY", "_URL"))}
    env["STACK_STATE_DIR"] = str(tmp_path)
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "runtime.cli", "run", "starter", "--port", str(port)],
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_healthy(f"http://127.0.0.1:{port}/v1/health", process)
        assert (tmp_path / "starter").is_dir()
        if importlib.util.find_spec("llama_cpp") is not None:  # the local extra: it answers with no key
            base = f"http://127.0.0.1:{port}/v1"
            models = [model["id"] for model in httpx2.get(f"{base}/models").json()["data"]]
            assert models == ["local/smollm2-135m-instruct", "local-embeddings/wordllama-l2-supercat"]
            answer = httpx2.post(f"{base}/chat/completions", timeout=60, json={
                "model": "smollm2-135m-instruct", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2})
            assert answer.status_code == 200 and answer.json()["choices"][0]["message"]["role"] == "assistant"
            # file_search's stores are embedded in process: a query sharing no word with the text finds it
            client = openai.OpenAI(base_url=base, api_key="none", max_retries=0)
            fees = client.files.create(file=("fees.txt", b"The harbour master collects mooring fees on Fridays."), purpose="assistants")
            store = client.vector_stores.create(name="docs", file_ids=[fees.id])
            deadline = time.monotonic() + 30
            while client.vector_stores.retrieve(store.id).status == "in_progress" and time.monotonic() < deadline:
                time.sleep(0.05)
            hits = client.vector_stores.search(vector_store_id=store.id, query="payment docking boats").data
            assert [hit.file_id for hit in hits] == [fees.id]
            # A coding agent's request (the Codex CLI sends web_search with every turn): the tool no
            # runtime serves here is left out, not the request refused.
            agent = client.responses.create(model="smollm2-135m-instruct", input="Hi", max_output_tokens=16, store=False,
                                            tools=[{"type": "web_search"}, {"type": "function", "name": "exec_command",
                                                                            "parameters": {"type": "object", "properties": {}}}])
            assert agent.status in ("completed", "incomplete")
            client.close()
    finally:
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=20)
    assert process.returncode == 0, output
    assert f"serving starter on http://127.0.0.1:{port}" in output
    assert "inactive provider: inference openai (openai): set OPENAI_API_KEY to enable it" in output
    assert "stopped" in output
    assert "Traceback" not in output
    if importlib.util.find_spec("llama_cpp") is not None:
        assert "left out of the model's view: tools of types no tool runtime serves (web_search)" in output


def test_tls_files_make_it_serve_https(tmp_path: Path) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    config = tmp_path / "run.yaml"
    config.write_text(f"name: tls\nstate_dir: {tmp_path / 'state'}\nserver:\n  tls_certfile: {cert}\n  tls_keyfile: {key}\n")
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "runtime.cli", "run", str(config), "--port", str(port)],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        import ssl

        context = ssl.create_default_context(cafile=str(cert))
        wait_healthy(f"https://127.0.0.1:{port}/v1/health", process, verify=context)
        with pytest.raises(httpx2.HTTPError):
            httpx2.get(f"http://127.0.0.1:{port}/v1/health", timeout=2)
    finally:
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=20)


def write_config(tmp_path: Path, name: str, server: str = "") -> str:
    config = tmp_path / "run.yaml"
    config.write_text(f"name: {name}\nstate_dir: {tmp_path / 'state'}\n" + (f"server:\n{server}" if server else ""))
    return str(config)


def test_cors_headers_follow_the_config(tmp_path: Path) -> None:
    with running_server(write_config(tmp_path, "cors", "  cors:\n    allow_origins: [https://app.example.com]\n")) as base_url:
        preflight = httpx2.options(f"{base_url}/health", headers={
            "origin": "https://app.example.com", "access-control-request-method": "GET"})
        assert preflight.status_code == 200
        assert preflight.headers["access-control-allow-origin"] == "https://app.example.com"
        other = httpx2.get(f"{base_url}/health", headers={"origin": "https://evil.example.com"})
        assert "access-control-allow-origin" not in other.headers
        # A form from an allowed origin's page is read (here, to find that no files API is served); another's is not.
        uploads = {origin: httpx2.post(f"{base_url}/files", files={"file": ("a.txt", b"x")}, data={"purpose": "assistants"},
                                       headers={"origin": origin, "sec-fetch-site": "cross-site"})
                   for origin in ("https://app.example.com", "https://evil.example.com")}
        assert uploads["https://app.example.com"].status_code != 415 and uploads["https://evil.example.com"].status_code == 415


def test_no_cors_headers_without_cors_config(tmp_path: Path) -> None:
    with running_server(write_config(tmp_path, "nocors")) as base_url:
        response = httpx2.get(f"{base_url}/health", headers={"origin": "https://app.example.com"})
        assert "access-control-allow-origin" not in response.headers


def test_the_openapi_document_lists_the_routes(tmp_path: Path) -> None:
    with running_server(write_config(tmp_path, "doc")) as base_url:
        document = httpx2.get(base_url.removesuffix("/v1") + "/openapi.json").json()
        assert "/v1/health" in document["paths"]
        assert document["info"]["title"] == "stack: doc"
