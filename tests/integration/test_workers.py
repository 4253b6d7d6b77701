"""`stack run --workers N` (issue 14, item 1): N processes serving one port on one SQLite file,
under concurrent stored responses and conversation appends, with no "database is locked" for any
client; both workers serve; SIGTERM drains and stops them all."""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx2
import openai

from fake_upstream.server import FakeUpstream
from runtime.testing.targets import free_port
from support.live_stack import run_yaml

PROVIDERS = "  conversations: [{provider_id: builtin, provider_type: builtin}]\n"


def children_of(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


@contextmanager
def supervised(config: Path, port: int, *options: str) -> Iterator[tuple[subprocess.Popen[bytes], list[int]]]:
    """`stack run config` with several workers, once every worker listens on `port` and answers;
    yields the supervisor and its workers' pids, and kills what is left at the end."""
    supervisor = subprocess.Popen([sys.executable, "-m", "runtime.cli", "run", str(config), "--port", str(port), *options],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    shared = ""
    try:
        deadline = time.monotonic() + 60
        while len(workers := children_of(supervisor.pid)) < 2 or not all(listening(pid, port) for pid in workers) \
                or not _healthy(f"http://127.0.0.1:{port}/v1"):
            assert supervisor.poll() is None, "the supervisor exited"
            assert time.monotonic() < deadline, "the workers did not come up"
            time.sleep(0.1)
        shared = _environ(workers[0]).get("STACK_WORKER_METRICS", "")
        yield supervisor, workers
    finally:
        left = children_of(supervisor.pid)
        if supervisor.poll() is None:
            supervisor.kill()
            supervisor.wait()
        for pid in left:  # had the kernel not stopped them with their supervisor
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if shared:  # what a supervisor killed outright leaves
            shutil.rmtree(shared, ignore_errors=True)


def test_two_workers_share_the_port_and_the_sqlite_file(tmp_path: Path, upstream: FakeUpstream) -> None:
    config = run_yaml(tmp_path, upstream.base_url, providers=PROVIDERS + "server:\n  workers: 2\n", name="workers")
    port = free_port()
    base = f"http://127.0.0.1:{port}/v1"
    with supervised(config, port) as (supervisor, workers):
        conversation = openai.OpenAI(base_url=base, api_key="none", max_retries=0).conversations.create()

        def turn(number: int) -> str:
            # A fresh connection each time, so the kernel spreads them over both workers.
            with openai.OpenAI(base_url=base, api_key="none", max_retries=0, timeout=60) as client:
                if number % 2:
                    return client.responses.create(model="fake-model", input=f"[tokens:3] turn {number}").status
                client.conversations.items.create(conversation.id, items=[
                    {"type": "message", "role": "user", "content": f"item {number}"}])
                return "completed"

        with concurrent.futures.ThreadPoolExecutor(64) as pool:
            outcomes = list(pool.map(turn, range(256)))
        assert outcomes == ["completed"] * 256  # no client saw "database is locked", nor any error
        with openai.OpenAI(base_url=base, api_key="none", max_retries=0) as client:
            items = list(client.conversations.items.list(conversation.id, limit=100, order="asc").iter_pages())
            assert sum(len(page.data) for page in items) == 128  # every append landed, none twice
        owners = {row[0] for row in sqlite3.connect(tmp_path / "state" / "stack.db").execute("SELECT owner FROM responses")}
        assert len({owner.split(":")[1] for owner in owners}) == 2  # both workers produced responses
        supervisor.send_signal(signal.SIGTERM)
        assert supervisor.wait(timeout=30) == 0
        assert not any(Path(f"/proc/{pid}").exists() for pid in workers)


def test_a_worker_that_dies_is_started_again_and_the_others_serve_meanwhile(tmp_path: Path, upstream: FakeUpstream) -> None:
    config = run_yaml(tmp_path, upstream.base_url, name="workers")
    port = free_port()
    base = f"http://127.0.0.1:{port}/v1"
    with supervised(config, port, "--workers", "2") as (supervisor, workers):
        first, second = workers
        subprocess.run(["kill", "-9", str(first)], check=True)
        for _ in range(20):  # the other one answers meanwhile
            assert _healthy(base)
        deadline = time.monotonic() + 30
        while True:
            now = children_of(supervisor.pid)
            if len(now) == 2 and first not in now:
                break
            assert time.monotonic() < deadline, "the dead worker was not replaced"
            time.sleep(0.1)
        assert second in now
        supervisor.send_signal(signal.SIGINT)
        assert supervisor.wait(timeout=30) == 0


def test_workers_whose_supervisor_is_killed_outright_stop_and_free_the_port(tmp_path: Path, upstream: FakeUpstream) -> None:
    config = run_yaml(tmp_path, upstream.base_url, name="workers")
    port = free_port()
    with supervised(config, port, "--workers", "2") as (supervisor, workers):
        supervisor.kill()  # SIGKILL: nothing of the supervisor runs to pass a signal on
        supervisor.wait()
        deadline = time.monotonic() + 30
        while any(Path(f"/proc/{pid}").exists() and not _zombie(pid) for pid in workers):
            assert time.monotonic() < deadline, "the workers outlived their supervisor"
            time.sleep(0.1)
        assert not _healthy(f"http://127.0.0.1:{port}/v1")  # nobody holds the port


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_several_workers_need_a_fixed_port(tmp_path: Path, upstream: FakeUpstream) -> None:
    config = run_yaml(tmp_path, upstream.base_url, name="workers")
    refused = subprocess.run([sys.executable, "-m", "runtime.cli", "run", str(config), "--port", "0", "--workers", "2"],
                             capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and "fixed port" in refused.stderr


def listening(pid: int, port: int) -> bool:
    """Whether process `pid` holds a socket listening on `port` (read from /proc)."""
    inodes = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:] + Path("/proc/net/tcp6").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
            inodes.add(fields[9])
    try:
        links = [os.readlink(entry) for entry in Path(f"/proc/{pid}/fd").iterdir()]
    except OSError:
        return False
    return any(link == f"socket:[{inode}]" for link in links for inode in inodes)


def _healthy(base: str) -> bool:
    try:
        return httpx2.get(f"{base}/health", timeout=1).status_code == 200
    except httpx2.HTTPError:
        return False


def test_a_cancel_sent_to_any_worker_stops_the_response_another_runs(tmp_path: Path, upstream: FakeUpstream) -> None:
    # lease_s 3600: without a signal between the workers, the one running a response would hear
    # of a cancel sent to the other only at its next lease renewal, 20 minutes later.
    config = run_yaml(tmp_path, upstream.base_url, responses="{lease_s: 3600}", name="workers")
    port = free_port()
    base = f"http://127.0.0.1:{port}/v1"

    def fresh() -> openai.OpenAI:  # a connection of its own: the kernel spreads them over both workers
        return openai.OpenAI(base_url=base, api_key="none", max_retries=0, timeout=30)

    with supervised(config, port, "--workers", "2"):
        for _ in range(6):  # each cancel lands on either worker: one of six on the runner itself, by chance
            with fresh() as client:
                running = client.responses.create(model="fake-model", input="[tokens:400] [slow:20] long", background=True)
            deadline = time.monotonic() + 20
            while True:
                with fresh() as client:
                    if client.responses.retrieve(running.id).status != "queued":
                        break
                assert time.monotonic() < deadline, "the response never started"
                time.sleep(0.05)
            abandoned = len(upstream.abandoned)
            with fresh() as client:
                assert client.responses.cancel(running.id).status == "cancelled"
            deadline = time.monotonic() + 20
            while len(upstream.abandoned) == abandoned:
                assert time.monotonic() < deadline, "the worker running the response went on with its model call"
                time.sleep(0.02)
            with fresh() as client:
                assert client.responses.retrieve(running.id).status == "cancelled"


def test_a_background_response_is_followed_from_either_worker_as_it_is_written(tmp_path: Path, upstream: FakeUpstream) -> None:
    # stream_poll_s 600: a follower on the other worker is woken by the signal, never by its poll.
    config = run_yaml(tmp_path, upstream.base_url, responses="{stream_poll_s: 600}", name="workers")
    port = free_port()
    base = f"http://127.0.0.1:{port}/v1"
    with supervised(config, port, "--workers", "2"):
        for _ in range(4):
            with openai.OpenAI(base_url=base, api_key="none", max_retries=0, timeout=60) as client:
                started = client.responses.create(model="fake-model", input="[tokens:12] [slow:50] follow me", background=True)
            with openai.OpenAI(base_url=base, api_key="none", max_retries=0, timeout=60) as client:
                events = list(client.responses.retrieve(started.id, stream=True, starting_after=0))
            assert events[-1].type == "response.completed"
            assert [event.sequence_number for event in events] == list(range(1, len(events) + 1))
            assert "".join(event.delta for event in events if event.type == "response.output_text.delta") == " ".join(
                f"tok{number}" for number in range(1, 13))


def test_a_scrape_of_either_worker_counts_the_whole_server(tmp_path: Path, upstream: FakeUpstream) -> None:
    # Issue 45, item 5: each scrape sums every worker's metrics, and a worker killed outright keeps
    # its counts in the sum (a counter never goes back), its replacement going on from them.
    config = run_yaml(tmp_path, upstream.base_url, providers="server:\n  metrics: {}\n", name="workers")
    port = free_port()
    base = f"http://127.0.0.1:{port}/v1"

    def chats(clients: int, each: int) -> None:  # a connection per client: the kernel spreads them over the workers
        def run(_: int) -> None:
            with openai.OpenAI(base_url=base, api_key="none", max_retries=0, timeout=30) as client:
                for _ in range(each):
                    client.chat.completions.create(model="fake-model", messages=[{"role": "user", "content": "[tokens:2] hi"}])

        with concurrent.futures.ThreadPoolExecutor(clients) as pool:
            list(pool.map(run, range(clients)))

    with supervised(config, port, "--workers", "2") as (supervisor, workers):
        shared = Path(_environ(workers[0])["STACK_WORKER_METRICS"])
        chats(16, 10)
        for _ in range(6):  # each scrape on a connection of its own: either worker answers
            assert _chats(httpx2.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text) == 160
        own = [_chats_in(shared / f"{number}.json") for number in (0, 1)]  # what each worker counted itself
        assert sum(own) == 160 and min(own) > 0, own
        subprocess.run(["kill", "-9", str(workers[0])], check=True)
        while Path(f"/proc/{workers[0]}").exists() and not _zombie(workers[0]):
            time.sleep(0.02)
        for _ in range(3):
            assert _chats(httpx2.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text) == 160
        deadline = time.monotonic() + 30
        while len(replaced := children_of(supervisor.pid)) < 2 or not all(listening(pid, port) for pid in replaced):
            assert time.monotonic() < deadline, "the dead worker was not replaced"
            time.sleep(0.1)
        chats(8, 5)
        for _ in range(4):
            assert _chats(httpx2.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text) == 200
        supervisor.send_signal(signal.SIGTERM)
        assert supervisor.wait(timeout=30) == 0
    assert not shared.exists()  # the supervisor's to remove


def _chats(exposition: str) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    return sum(sample.value for family in text_string_to_metric_families(exposition) for sample in family.samples
               if sample.name == "stack_requests_total" and sample.labels.get("route") == "/v1/chat/completions")


def _chats_in(snapshot: Path) -> float:
    from runtime.observability.metrics import merged

    return _chats(merged([json.loads(snapshot.read_text())]).exposition().decode())


def _environ(pid: int) -> dict[str, str]:
    entries = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(entry.decode().split("=", 1) for entry in entries if b"=" in entry)
