"""The Batch API (issue 48) through the `openai` SDK, over the server and the library client: a
file of requests to each endpoint run through the stack's own routes, partial failures in the
error file, validation with line numbers, cancel, expiry, isolation between principals; and a
batch whose server is killed mid-run finished by another server on the same database, every
`custom_id` answered once."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai
import pytest

from fake_upstream import CHAT_MODEL, EMBED_MODEL, FakeUpstream, running_fake_upstream
from runtime.testing.targets import StackTarget, free_port, open_target
from support.postgres import fresh_database

MODEL = f"fake/{CHAT_MODEL}"
DONE = ("completed", "failed", "expired", "cancelled")


def run_yaml(root: Path, upstream: FakeUpstream, *, window_s: float | None = None, lease_s: float = 30, dsn: str | None = None) -> Path:
    batches = f"{{lease_s: {lease_s}" + (f", window_s: {window_s}" if window_s else "") + ", concurrency: 4}"
    storage = (f"storage:\n  backends:\n    pg: {{type: postgres, dsn: '{dsn}'}}\n  stores: {{batches: pg, files: pg, metadata: pg}}\n"
               if dsn else "")
    path = root / "run.yaml"
    path.write_text(f"""name: batches
state_dir: {root / 'state'}
recording: {{mode: live}}
providers:
  inference: [{{provider_id: fake, provider_type: openai, config: {{base_url: '{upstream.base_url}', api_key: k}}}}]
  files: [{{provider_id: local, provider_type: local}}]
  responses: [{{provider_id: builtin, provider_type: builtin}}]
  messages: [{{provider_id: builtin, provider_type: builtin}}]
  batches: [{{provider_id: builtin, provider_type: builtin, config: {batches}}}]
server:
  auth:
    api_keys:
      - {{principal: alice, key: sk-alice-0123456789}}
      - {{principal: bob, key: sk-bob-0123456789}}
{storage}""")
    return path


@dataclass
class Stack:
    target: StackTarget
    upstream: FakeUpstream

    def client(self, who: str = "alice") -> openai.OpenAI:
        return self.target.openai(api_key=f"sk-{who}-0123456789", max_retries=0, timeout=30)


@pytest.fixture(scope="module", params=["server", "library"])
def stack(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("batches")
    with running_fake_upstream() as upstream:
        config = run_yaml(root, upstream)
        with open_target(f"{request.param}:{config}", env={**os.environ, "STACK_RECORDING_MODE": "live"}) as target:
            yield Stack(target, upstream)


def line(custom_id: str, body: dict[str, Any], url: str = "/v1/chat/completions") -> str:
    return json.dumps({"custom_id": custom_id, "method": "POST", "url": url, "body": body})


def chat(custom_id: str, text: str = "Hello") -> str:
    return line(custom_id, {"model": MODEL, "messages": [{"role": "user", "content": text}]})


def submit(client: openai.OpenAI, lines: list[str], endpoint: str = "/v1/chat/completions", **fields: Any) -> Any:
    upload = client.files.create(file=("requests.jsonl", io.BytesIO("\n".join(lines).encode())), purpose="batch")
    return client.batches.create(input_file_id=upload.id, endpoint=endpoint, completion_window="24h", **fields)  # type: ignore[arg-type]


def wait(client: openai.OpenAI, batch_id: str, until: Callable[[Any], bool] = lambda b: b.status in DONE, timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        batch = client.batches.retrieve(batch_id)
        if until(batch):
            return batch
        assert time.monotonic() < deadline, batch
        time.sleep(0.05)


def jsonl(client: openai.OpenAI, file_id: str | None) -> list[dict[str, Any]]:
    return [] if file_id is None else [json.loads(text) for text in client.files.content(file_id).text.splitlines()]


def test_a_chat_batch_runs_every_request_and_files_the_answers_and_the_failures(stack: Stack) -> None:
    client = stack.client()
    lines = [chat(f"q{number}", f"question {number}") for number in range(6)]
    lines.insert(3, "{not json")
    lines.append(line("bad-body", {"model": MODEL, "messages": "not a list"}))
    created = submit(client, lines, metadata={"run": "nightly"})
    assert created.status == "validating" and created.metadata == {"run": "nightly"} and created.expires_at > created.created_at
    batch = wait(client, created.id)
    assert batch.status == "completed" and batch.model == MODEL
    assert batch.request_counts.model_dump() == {"total": 8, "completed": 6, "failed": 2}
    assert batch.in_progress_at and batch.finalizing_at and batch.completed_at and batch.usage.total_tokens > 0
    assert [(error.line, error.code, error.param) for error in batch.errors.data] == [
        (4, "invalid_json_line", None), (8, "invalid_value", "body.messages")]  # the chat route's own check, before anything ran
    output = jsonl(client, batch.output_file_id)
    assert sorted(entry["custom_id"] for entry in output) == [f"q{number}" for number in range(6)]
    first = output[0]
    assert first["id"].startswith("batch_req_") and first["error"] is None and first["response"]["status_code"] == 200
    assert first["response"]["request_id"].startswith("req_") and first["response"]["body"]["object"] == "chat.completion"
    errors = {entry["custom_id"]: entry for entry in jsonl(client, batch.error_file_id)}
    assert errors[None]["error"]["code"] == "invalid_json_line" and errors[None]["response"] is None
    assert errors["bad-body"]["response"] is None and "'messages'" in errors["bad-body"]["error"]["message"]
    assert client.files.retrieve(batch.output_file_id).purpose == "batch_output"


@pytest.mark.parametrize(("endpoint", "body", "kind"), [
    ("/v1/embeddings", {"model": f"fake/{EMBED_MODEL}", "input": "a text to embed"}, "list"),
    ("/v1/completions", {"model": MODEL, "prompt": "Once upon a time"}, "text_completion"),
    ("/v1/responses", {"model": MODEL, "input": "Hello there"}, "response"),
    ("/v1/messages", {"model": MODEL, "max_tokens": 64, "messages": [{"role": "user", "content": "Hello"}]}, "message"),
])
def test_every_endpoint_that_calls_a_model_runs_in_a_batch(stack: Stack, endpoint: str, body: dict[str, Any], kind: str) -> None:
    client = stack.client()
    batch = wait(client, submit(client, [line(f"{kind}-{number}", body, endpoint) for number in range(3)], endpoint).id)
    assert batch.status == "completed" and batch.request_counts.completed == 3, batch
    answers = jsonl(client, batch.output_file_id)
    assert {answer["response"]["body"].get("object") or answer["response"]["body"].get("type") for answer in answers} == {kind}


def test_a_file_whose_every_line_is_wrong_fails_the_batch_with_the_lines_named(stack: Stack) -> None:
    client = stack.client()
    lines = [line("a", {"model": MODEL}, url="/v1/embeddings"), json.dumps({"custom_id": "b", "method": "GET", "url": "/v1/chat/completions",
                                                                           "body": {"model": MODEL}})]
    batch = wait(client, submit(client, lines).id)
    assert batch.status == "failed" and batch.failed_at
    assert [(error.line, error.code, error.param) for error in batch.errors.data] == [(1, "mismatched_endpoint", "url"),
                                                                                      (2, "invalid_method", "method")]


@pytest.mark.parametrize(("fields", "status", "param"), [
    ({"endpoint": "/v1/moderations"}, 400, "endpoint"),
    ({"completion_window": "48h"}, 400, "completion_window"),
    ({"input_file_id": "file-nope"}, 404, None),
    ({"purpose": "assistants"}, 400, "input_file_id"),
    ({"colour": "blue"}, 400, "colour"),
])
def test_a_bad_request_is_refused_before_anything_runs(stack: Stack, fields: dict[str, Any], status: int, param: str | None) -> None:
    client, fields = stack.client(), dict(fields)
    upload = client.files.create(file=("r.jsonl", io.BytesIO(chat("x").encode())), purpose=fields.pop("purpose", "batch"))  # type: ignore[arg-type]
    body = {"input_file_id": upload.id, "endpoint": "/v1/chat/completions", "completion_window": "24h", **fields}
    with pytest.raises(openai.APIStatusError) as raised:
        client.post("/batches", body=body, cast_to=object)
    assert raised.value.status_code == status
    if param is not None:
        assert raised.value.body["param"] == param  # type: ignore[index]


def test_cancel_stops_new_requests_and_keeps_the_finished_ones(stack: Stack) -> None:
    client = stack.client()
    batch = submit(client, [chat(f"slow{number}", "[slow:300] take your time") for number in range(20)])
    wait(client, batch.id, lambda b: b.status == "in_progress" and b.request_counts.completed >= 1)
    cancelling = client.batches.cancel(batch.id)
    assert cancelling.status in ("cancelling", "cancelled") and cancelling.cancelling_at
    batch = wait(client, batch.id)
    assert batch.status == "cancelled" and batch.cancelled_at
    assert 1 <= batch.request_counts.completed < 20
    assert len(jsonl(client, batch.output_file_id)) == batch.request_counts.completed


def test_batches_are_their_owners_own(stack: Stack) -> None:
    alice, bob = stack.client("alice"), stack.client("bob")
    batch = wait(alice, submit(alice, [chat("mine")]).id)
    with pytest.raises(openai.NotFoundError):
        bob.batches.retrieve(batch.id)
    with pytest.raises(openai.NotFoundError):
        bob.files.content(batch.output_file_id)
    assert batch.id not in [b.id for b in bob.batches.list()]
    listed = alice.batches.list(limit=2)
    assert listed.data[0].id == batch.id and listed.has_more
    assert alice.batches.list(after=listed.data[-1].id, limit=100).data[0].id not in {b.id for b in listed.data}


def test_a_batch_past_its_window_expires_with_what_finished(tmp_path: Path) -> None:
    with running_fake_upstream() as upstream:
        config = run_yaml(tmp_path, upstream, window_s=3)
        with open_target(f"library:{config}", env={**os.environ, "STACK_RECORDING_MODE": "live"}) as target:
            client = target.openai(api_key="sk-alice-0123456789", max_retries=0)
            # 60 requests of half a second, four at a time: 7.5 s of work in a 3 s window.
            batch = wait(client, submit(client, [chat(f"s{number}", "[slow:500] slowly") for number in range(60)]).id)
            finished = jsonl(client, batch.output_file_id)
    assert batch.status == "expired" and batch.expired_at
    assert 1 <= batch.request_counts.completed < 60 and len(finished) == batch.request_counts.completed


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database(request: pytest.FixtureRequest) -> Iterator[str | None]:
    """None: the stack's SQLite file; else the DSN of a fresh PostgreSQL database."""
    if request.param == "sqlite":
        yield None
        return
    with fresh_database() as dsn:
        yield dsn


def test_a_batch_whose_server_dies_is_finished_by_another_exactly_once(tmp_path: Path, database: str | None) -> None:
    with running_fake_upstream() as upstream:
        config = run_yaml(tmp_path, upstream, lease_s=1, dsn=database)
        env = {**os.environ, "STACK_RECORDING_MODE": "live"}
        first, second = free_port(), free_port()
        doomed = subprocess.Popen([sys.executable, "-m", "runtime.cli", "run", str(config), "--port", str(first)], env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            with openai.OpenAI(base_url=f"http://127.0.0.1:{first}/v1", api_key="sk-alice-0123456789", max_retries=0) as client:
                _wait_up(client)
                batch = submit(client, [chat(f"c{number}", "[slow:150] steady") for number in range(30)])
                wait(client, batch.id, lambda b: b.request_counts.completed >= 4)
                doomed.send_signal(signal.SIGKILL)
                doomed.wait()
        finally:
            if doomed.poll() is None:
                doomed.kill()
        with open_target(f"server:{config}:{second}", env=env) as target:
            client = target.openai(api_key="sk-alice-0123456789", max_retries=0)
            done = wait(client, batch.id, timeout=60)
            answered = [entry["custom_id"] for entry in jsonl(client, done.output_file_id)]
    assert done.status == "completed" and done.request_counts.model_dump() == {"total": 30, "completed": 30, "failed": 0}
    assert sorted(answered) == sorted(f"c{number}" for number in range(30))  # every one, none twice


def _wait_up(client: openai.OpenAI) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            client.models.list()
            return
        except openai.APIConnectionError:
            assert time.monotonic() < deadline
            time.sleep(0.1)
