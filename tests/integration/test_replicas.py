"""Replicas on one PostgreSQL (issue 14, items 2 and 4): three `stack run` processes on a fresh
database, requests spread round robin over them through the openai SDK. A chain or a conversation
goes on at any replica, appends from several replicas at once keep their blocks, a cancel sent to
one replica stops the response another runs, a background response is followed from another
replica, and a replica killed mid-response has its work taken over."""

from __future__ import annotations

import base64
import concurrent.futures
import itertools
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx2
import openai
import pytest

from fake_upstream.server import FakeUpstream
from runtime.testing.targets import free_port
from support.postgres import fresh_database

pytestmark = pytest.mark.postgres

KEY = base64.b64encode(os.urandom(32)).decode()


@dataclass
class Replicas:
    processes: list[subprocess.Popen[bytes]]
    clients: list[openai.OpenAI]

    def __post_init__(self) -> None:
        self._next = itertools.cycle(range(len(self.clients)))

    def any(self) -> openai.OpenAI:
        """The next replica, round robin."""
        return self.clients[next(self._next)]


def _config(root: Path, upstream: FakeUpstream, dsn: str, name: str, lease_s: float = 6) -> Path:
    path = root / f"{name}.yaml"
    path.write_text(f"""
name: replicas
state_dir: {root / name}
recording: {{mode: live}}
providers:
  inference: [{{provider_id: fake, provider_type: openai, config: {{base_url: "{upstream.base_url}", api_key: k}}}}]
  responses: [{{provider_id: builtin, provider_type: builtin, config: {{reasoning_key: "{KEY}", lease_s: {lease_s}, stream_poll_s: 5}}}}]
  conversations: [{{provider_id: builtin, provider_type: builtin}}]
storage:
  backends:
    pg: {{type: postgres, dsn: "{dsn}", pool_size: 8}}
  stores: {{responses: pg, conversations: pg, chat_completions: pg, metadata: pg}}
""")
    return path


@pytest.fixture
def replicas(request: pytest.FixtureRequest, tmp_path: Path, upstream: FakeUpstream) -> Iterator[Replicas]:
    """Three replicas on one database; their responses' lease is 6 s unless the test asks for
    another (`@pytest.mark.parametrize("replicas", [60], indirect=True)`)."""
    lease_s = getattr(request, "param", 6)
    with fresh_database() as dsn:
        processes, clients = [], []
        try:
            for number in range(3):
                port = free_port()
                config = _config(tmp_path, upstream, dsn, f"replica{number}", lease_s)
                processes.append(subprocess.Popen([sys.executable, "-m", "runtime.cli", "run", str(config), "--port", str(port)],
                                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
                clients.append(openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0, timeout=30))
            for process, client in zip(processes, clients):
                _wait_healthy(process, str(client.base_url))
            yield Replicas(processes, clients)
        finally:
            for process in processes:
                if process.poll() is None:
                    process.send_signal(signal.SIGTERM)
            for process in processes:
                try:
                    process.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
            for client in clients:
                client.close()


def _wait_healthy(process: subprocess.Popen[bytes], base_url: str) -> None:
    deadline = time.monotonic() + 60
    while True:
        assert process.poll() is None, "a replica exited at start"
        try:
            if httpx2.get(f"{base_url.rstrip('/')}/health", timeout=1).status_code == 200:
                return
        except httpx2.HTTPError:
            pass
        assert time.monotonic() < deadline, "a replica did not start"
        time.sleep(0.1)


def test_a_chain_and_a_conversation_go_on_at_any_replica(replicas: Replicas, upstream: FakeUpstream) -> None:
    first = replicas.any().responses.create(model="fake-model", input="[tokens:1] my name is Ada")
    second = replicas.any().responses.create(model="fake-model", input="[tokens:1] and I like tea", previous_response_id=first.id)
    third = replicas.any().responses.create(model="fake-model", input="[tokens:1] what do you know?", previous_response_id=second.id)
    assert third.status == "completed"
    seen = str(upstream.requests[-1].body)
    assert "my name is Ada" in seen and "and I like tea" in seen  # the whole chain reached the model
    conversation = replicas.any().conversations.create()
    for text in ("one", "two", "three"):
        replicas.any().responses.create(model="fake-model", input=f"[tokens:1] {text}", conversation=conversation.id)
    items = replicas.any().conversations.items.list(conversation.id, order="asc", limit=100).data
    assert [item.type for item in items] == ["message"] * 6


def test_concurrent_appends_from_every_replica_keep_their_blocks(replicas: Replicas) -> None:
    conversation = replicas.any().conversations.create()

    def append(number: int) -> None:
        replicas.clients[number % 3].conversations.items.create(conversation.id, items=[
            {"type": "message", "role": "user", "content": f"block {number} first"},
            {"type": "message", "role": "user", "content": f"block {number} second"}])

    with concurrent.futures.ThreadPoolExecutor(12) as pool:
        list(pool.map(append, range(36)))
    items = replicas.any().conversations.items.list(conversation.id, order="asc", limit=100).data
    texts = [item.content[0].text for item in items]  # type: ignore[union-attr]
    assert len(texts) == 72
    for index in range(0, 72, 2):  # every block whole, in place: no append interleaved with another
        number = texts[index].split()[1]
        assert (texts[index], texts[index + 1]) == (f"block {number} first", f"block {number} second")


@pytest.mark.parametrize("replicas", [60], indirect=True)
def test_a_cancel_sent_to_one_replica_stops_the_response_another_runs(replicas: Replicas, upstream: FakeUpstream) -> None:
    runner, canceller, reader = replicas.clients
    calls = len(upstream.bodies())
    running = runner.responses.create(model="fake-model", input="[tokens:1500] [slow:20] long", background=True)
    # Until its model call has begun: a cancel that comes before it leaves no answer to abandon (a
    # loaded machine took long enough between `in_progress` and the call for one to, once).
    deadline = time.monotonic() + 10
    while len(upstream.bodies()) == calls and time.monotonic() < deadline:
        time.sleep(0.05)
    abandoned = len(upstream.abandoned)
    cancelled = canceller.responses.cancel(running.id)
    assert cancelled.status == "cancelled"
    # The replica running it hears of the cancel at once (PostgreSQL's NOTIFY) and cuts its model
    # call. Its lease renewal, the only other way it would hear, comes every lease_s / 3 = 20 s
    # here, and the model call would go on for 30 s: a cut within 10 s is the notification's,
    # however loaded the machine (a bound of 1 s against a renewal every 2 s failed under load).
    cancelled_at = time.monotonic()
    while len(upstream.abandoned) == abandoned:
        assert time.monotonic() - cancelled_at < 10.0, "the running replica went on with its model call"
        time.sleep(0.01)
    after = reader.responses.retrieve(running.id)
    assert after.status == "cancelled"
    # Once stopped, the running replica keeps the output it had produced, in a write of its own
    # made after its model call is cut (engine._persist_end): a read just after the cut may come
    # before it. Wait for that output, then nothing writes the response any more.
    deadline = time.monotonic() + 5
    while not after.output and time.monotonic() < deadline:
        time.sleep(0.05)
        after = reader.responses.retrieve(running.id)
    assert after.status == "cancelled"
    time.sleep(1)
    again = reader.responses.retrieve(running.id)
    assert (again.status, again.output) == (after.status, after.output)  # nobody still writes it


def test_a_background_response_is_followed_live_from_another_replica(replicas: Replicas) -> None:
    runner, follower, _ = replicas.clients
    started = runner.responses.create(model="fake-model", input="[tokens:30] [slow:100] follow me", background=True)
    events, arrived = [], []
    began = time.monotonic()
    for event in follower.responses.retrieve(started.id, stream=True, starting_after=0):
        events.append(event)
        arrived.append(time.monotonic() - began)
    deltas = [at for event, at in zip(events, arrived) if event.type == "response.output_text.delta"]
    # The text comes as it is written (3 s of it), not in one burst when the item ends, and
    # without waiting for the fallback poll (stream_poll_s: 5 s here): NOTIFY wakes the follower.
    assert deltas[0] < 1.0 and deltas[-1] - deltas[0] > 2.0
    assert events[-1].type == "response.completed"
    assert [event.sequence_number for event in events] == list(range(1, len(events) + 1))
    assert "".join(event.delta for event in events if event.type == "response.output_text.delta") == " ".join(
        f"tok{number}" for number in range(1, 31))


def test_a_replica_killed_mid_response_has_its_work_taken_over(replicas: Replicas) -> None:
    doomed, survivor, _ = replicas.clients
    started = doomed.responses.create(model="fake-model", input="[tokens:600] [slow:20] interrupted", background=True)
    deadline = time.monotonic() + 10
    while doomed.responses.retrieve(started.id).status == "queued" and time.monotonic() < deadline:
        time.sleep(0.05)
    replicas.processes[0].send_signal(signal.SIGKILL)
    replicas.processes[0].wait()
    deadline = time.monotonic() + 30
    while survivor.responses.retrieve(started.id).status in ("queued", "in_progress"):
        assert time.monotonic() < deadline, "the dead replica's response stayed in_progress"
        time.sleep(0.2)
    ended = survivor.responses.retrieve(started.id)
    assert ended.status == "failed" and ended.error is not None  # marked failed with a reason, never left in_progress


def test_a_response_deleted_on_one_replica_is_not_continued_from_anothers_cache(replicas: Replicas) -> None:
    first, second, _ = replicas.clients
    kept = first.responses.create(model="fake-model", input="[tokens:1] remember me")
    assert first.responses.create(model="fake-model", input="[tokens:1] go on", previous_response_id=kept.id).status == "completed"
    second.responses.delete(kept.id)  # the first replica still holds its context in memory
    with pytest.raises(openai.BadRequestError) as gone:
        first.responses.create(model="fake-model", input="[tokens:1] and again", previous_response_id=kept.id)
    assert gone.value.body["code"] == "previous_response_not_found"  # type: ignore[index]
