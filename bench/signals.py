"""Signals between processes: how soon a second process sharing the state hears what the first
did (issue 14, item 5: cross-replica cancel latency and resumed-stream event latency).

Starts the fake upstream and two `stack run bench/stack-run.yaml` processes on one SQLite state
directory, each on a port of its own (what `--workers 2` does, with the worker known), or with
`--postgres` two replicas on a fresh PostgreSQL database (127.0.0.1:5432, dropped at the end), and
with the `openai` SDK:

- resumed stream: a background response streamed by process A as it is made (`background` with
  `stream`), and followed at the same time from process B (`GET /v1/responses/{id}?stream=true`);
  for each text delta, how much later B's follower has it than A's own stream. Then the same with
  the follower on A (the local case, for comparison).
- cancel: a background response run by A, cancelled through B; the time from B's answer to the
  cancel to the end of A's stream of that response (A has stopped it).

    .venv/bin/python bench/signals.py [--responses 5] [--postgres]    # about 20 s
"""

from __future__ import annotations

import argparse
import contextlib
import secrets
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import openai

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import ROOT, STACK, free_port, stack_env, start_unpinned_upstream, stop  # noqa: E402

RUN_YAML = ROOT / "bench" / "stack-run.yaml"


POSTGRES_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"


@contextmanager
def postgres_database() -> Iterator[str]:
    import asyncio

    import asyncpg  # type: ignore[import-untyped]

    async def admin(statement: str) -> None:
        connection = await asyncpg.connect(POSTGRES_ADMIN, timeout=5)
        try:
            await connection.execute(statement)
        finally:
            await connection.close()

    name = f"stack_bench_{secrets.token_hex(6)}"
    asyncio.run(admin(f'CREATE DATABASE "{name}"'))
    try:
        yield f"postgresql://postgres@127.0.0.1:5432/{name}"
    finally:
        asyncio.run(admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@contextmanager
def two_processes(dsn: str | None) -> Iterator[tuple[openai.OpenAI, openai.OpenAI]]:
    with tempfile.TemporaryDirectory(prefix="stack-bench-signals-") as temp:
        logs = Path(temp)
        run_yaml = RUN_YAML
        if dsn is not None:
            run_yaml = logs / "run.yaml"
            run_yaml.write_text(RUN_YAML.read_text() + f"""
storage:
  backends:
    pg: {{type: postgres, dsn: "{dsn}", pool_size: 8}}
  stores: {{responses: pg, conversations: pg, chat_completions: pg, metadata: pg}}
""")
        upstream, url = start_unpinned_upstream(logs)
        processes = [upstream]
        try:
            environment = stack_env(url, logs / "state")
            clients = []
            for name in ("a", "b"):
                port = free_port()
                with (logs / f"stack-{name}.log").open("ab") as sink:
                    processes.append(subprocess.Popen([STACK, "run", str(run_yaml), "--port", str(port)], cwd=ROOT,
                                                      env=environment, stdout=sink, stderr=sink, start_new_session=True))
                client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0, timeout=60)
                deadline = time.monotonic() + 60
                while True:
                    try:
                        client.models.list()
                        break
                    except openai.APIConnectionError:
                        if time.monotonic() > deadline:
                            raise
                        time.sleep(0.1)
                clients.append(client)
            yield clients[0], clients[1]
        finally:
            for process in reversed(processes):
                stop(process)


def delta_arrivals(stream: openai.Stream, arrivals: dict[int, float]) -> None:
    for event in stream:
        if event.type == "response.output_text.delta":
            arrivals[event.sequence_number] = time.perf_counter()


def follow_lag(producer: openai.OpenAI, follower: openai.OpenAI) -> list[float]:
    """Milliseconds each text delta reached `follower`'s resumed stream after `producer`'s own."""
    made: dict[int, float] = {}
    followed: dict[int, float] = {}
    stream = producer.responses.create(model="fake-model", input="[tokens:40] [slow:25] follow me", background=True, stream=True)
    first = next(iter(stream))  # response.created: the response exists, so it can be followed
    following = threading.Thread(target=delta_arrivals, args=(
        follower.responses.retrieve(first.response.id, stream=True, starting_after=0), followed))
    following.start()
    delta_arrivals(stream, made)
    following.join()
    return [(followed[number] - made[number]) * 1000 for number in made if number in followed]


def cancel_lag(runner: openai.OpenAI, canceller: openai.OpenAI) -> float:
    """Milliseconds from `canceller`'s answer to a cancel to the end of `runner`'s stream."""
    stream = runner.responses.create(model="fake-model", input="[tokens:400] [slow:20] long", background=True, stream=True)
    events = iter(stream)
    created = next(events)
    for event in events:
        if event.type == "response.output_text.delta":
            break
    canceller.responses.cancel(created.response.id)
    answered = time.perf_counter()
    for _ in events:
        pass
    return (time.perf_counter() - answered) * 1000


def summary(values: list[float]) -> str:
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))]
    return f"median {statistics.median(ordered):6.1f} ms   p90 {p90:6.1f} ms   max {ordered[-1]:6.1f} ms   ({len(ordered)} samples)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--responses", type=int, default=5, help="responses per measure")
    parser.add_argument("--postgres", action="store_true", help="two replicas on a fresh PostgreSQL database instead of one SQLite file")
    options = parser.parse_args()
    with contextlib.ExitStack() as stack:
        dsn = stack.enter_context(postgres_database()) if options.postgres else None
        a, b = stack.enter_context(two_processes(dsn))
        follow_lag(a, b)  # warm-up
        across = [lag for _ in range(options.responses) for lag in follow_lag(a, b)]
        local = [lag for _ in range(options.responses) for lag in follow_lag(a, a)]
        cancels = [cancel_lag(a, b) for _ in range(options.responses)]
    where = "two replicas on one PostgreSQL database" if options.postgres else "two stack processes on one SQLite state directory"
    print(f"{where} (fake upstream: a delta every 25 ms)")
    print(f"resumed stream, follower on the other process:  {summary(across)}")
    print(f"resumed stream, follower on the same process:   {summary(local)}")
    print(f"cancel through the other process, to the runner's stream end: {summary(cancels)}")


if __name__ == "__main__":
    main()
