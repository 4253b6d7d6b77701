"""The project side by side with SMG (Shepherd Model Gateway, a Rust gateway), in one run.

Issue 19 measures the chat hot path against SMG 1.13, the fastest peer: per core, the project
should be at or above it on every row below. This script installs SMG into a scratch virtual
environment (`~/.cache/stack-bench/smg-1.13.0`, or `$BENCH_SMG_VENV`; never a project dependency),
starts the fake upstream (tests/fake_upstream) on core 1, and then, in turn, SMG and
`stack run bench/stack-run.yaml` on core 0, each in front of that same upstream and measured by
the same client (this process, on core 1). The servers take turns over `--rounds` rounds, their
order swapped each round, so that a slow spell of this shared VM falls on both alike.

Rows (p50s are medians over the rounds, added latency is over the upstream measured in the
same round):

- chat, non-streamed, requests/s at c=32, with the server's CPU per request;
- chat, streamed (64 tokens), streams/s at c=32, with the server's CPU per stream;
- chat, non-streamed, added p50 at c=1, and the p99 and p99.9;
- chat, streamed, time to the first content added at c=1, and its p99 and p99.9;
- the production configuration (`--no-production` leaves it out): SMG with its log at `info` and its
  Prometheus metrics, the project with bench/chat-production-run.yaml (API keys, quotas in the
  process, metrics, a JSON access log, traces sampled at 10 % exported over OTLP): chat req/s at
  c=32, CPU per request, added p50 at c=1;
- conversation items: create one, and list `limit=100`, p50 in a conversation of 1,000 items;
- the same on PostgreSQL, both servers durable (`--postgres`, on by default; `--no-postgres`);
- start-up: from exec to the first `/v1/models` that lists the upstream's model;
- idle RSS, one second after that.

The c=1 chat rows are timed with the client at real-time priority (`common.prompt_client`; off
with `--no-prompt-client`): the client shares core 1 with the fake upstream, and at normal
priority a stream's first content was timed when the upstream's burst of events ended.

SMG runs `--backend openai --history-backend memory` with its log at `warn` (no per-request
log line; the project's access log is off too) unless `--smg-log-level info`. The project keeps
its conversations in SQLite (a file in a temporary directory); SMG keeps them in memory, so the
first item rows compare a durable commit with a write to a dict. The PostgreSQL rows start each
server again, on a fresh database of the server at `--postgres` (an admin DSN: the bench creates
and drops the databases): SMG with `--history-backend postgres`, the project with
`bench/stack-pg-run.yaml`. The PostgreSQL server is not pinned; it serves both alike.

    .venv/bin/python bench/smg.py [--rounds 2] [--duration 8] [--requests 1000] [--no-prompt-client] [--no-production] [--json PATH]

Each row prints SMG, the project and the ratio (above 1: the project is better), and for the
throughput and tail rows the project against the upstream alone measured in the same round (the
physical limit: x0.50 on chat req/s is half the upstream's own rate on its core).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (  # noqa: E402
    CLIENT_CORE, HOST, ROOT, STACK, STACK_CORE, UPSTREAM_CORE, Request, compile_project, connect, cpu_per_request_us, fetch,
    fetch_all, free_port, get, measure_throughput, percentile, post, progress, prompt_client, read_listening_url,
    sample_interleaved, spawn, stack_env, stop, table,
)

SMG_VERSION = "1.13.0"
RUN_YAML = ROOT / "bench" / "stack-run.yaml"
PG_RUN_YAML = ROOT / "bench" / "stack-pg-run.yaml"
PRODUCTION_RUN_YAML = ROOT / "bench" / "chat-production-run.yaml"
ADMIN_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
MODEL = "fake-model"
MESSAGE = "[tokens:64] benchmark"
EXPECT_CHAT = b"tok64"
# SMG asks for a bearer token on its model list; the project, with auth off, ignores it.
HEADERS = {"authorization": "Bearer bench-api-key-0001"}  # the production rows' key (bench/chat-production-run.yaml); SMG and the bare stack ignore it
CONVERSATION_SIZE = 1_000
PER_APPEND = 20
START_TIMEOUT_S = 60.0


# ---------------------------------------------------------------------------------------------
# The two servers


def smg_binary() -> Path:
    """`smg` from the scratch virtual environment, installed there first if it is not."""
    venv = Path(os.environ.get("BENCH_SMG_VENV") or Path.home() / ".cache" / "stack-bench" / f"smg-{SMG_VERSION}")
    binary = venv / "bin" / "smg"
    if not binary.exists():
        progress(f"installing smg=={SMG_VERSION} into {venv}")
        base = getattr(sys, "_base_executable", sys.executable)
        subprocess.run([base, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "pip"), "install", "--quiet", f"smg=={SMG_VERSION}"], check=True)
    return binary


@dataclass
class Server:
    name: str
    argv: Callable[[int], list[str]]  # given its port
    env: dict[str, str]


def servers(upstream_url: str, state: Path, smg_log_level: str, dsn: str | None = None) -> list[Server]:
    """Both servers, keeping conversations as in the main rows, or both in the PostgreSQL database `dsn`."""
    smg = smg_binary()
    prometheus_port = free_port()
    history = ["--history-backend", "postgres", "--postgres-db-url", dsn] if dsn else ["--history-backend", "memory"]

    def smg_argv(port: int) -> list[str]:
        return [str(smg), "launch", "--backend", "openai", "--worker-urls", upstream_url, *history,
                "--host", HOST, "--port", str(port),
                "--prometheus-host", HOST, "--prometheus-port", str(prometheus_port), "--log-level", smg_log_level]

    def stack_argv(port: int) -> list[str]:
        return [STACK, "run", str(PG_RUN_YAML if dsn else RUN_YAML), "--port", str(port)]

    env = stack_env(upstream_url, state) | ({"BENCH_POSTGRES_DSN": dsn} if dsn else {})
    return [Server("SMG", smg_argv, dict(os.environ)), Server("project", stack_argv, env)]


def production_servers(upstream_url: str, state: Path) -> list[Server]:
    """Both servers configured as they run in production (see `measure_production`)."""
    smg = smg_binary()
    prometheus_port = free_port()

    def smg_argv(port: int) -> list[str]:
        return [str(smg), "launch", "--backend", "openai", "--worker-urls", upstream_url, "--history-backend", "memory",
                "--host", HOST, "--port", str(port), "--prometheus-host", HOST, "--prometheus-port", str(prometheus_port),
                "--log-level", "info"]

    def stack_argv(port: int) -> list[str]:
        return [STACK, "run", str(PRODUCTION_RUN_YAML), "--port", str(port)]

    return [Server("SMG", smg_argv, dict(os.environ)), Server("project", stack_argv, stack_env(upstream_url, state))]


@contextlib.asynccontextmanager
async def fresh_database(admin_dsn: str) -> AsyncIterator[str]:
    """A new, empty database on the server of `admin_dsn`; its DSN. Dropped afterwards."""
    import asyncpg

    name = f"stack_bench_{os.getpid()}_{time.monotonic_ns()}"
    admin = await asyncpg.connect(admin_dsn, timeout=5)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
        try:
            yield admin_dsn.rsplit("/", 1)[0] + "/" + name
        finally:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def start(server: Server, port: int, log: Path) -> tuple[subprocess.Popen[bytes], float]:
    """The server's process and the seconds from exec to its first `/v1/models` listing MODEL."""
    models = get(port, "/v1/models", MODEL.encode(), headers=HEADERS)
    began = time.perf_counter()
    process = spawn(server.argv(port), STACK_CORE, server.env, log)
    deadline = began + START_TIMEOUT_S
    while time.perf_counter() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{server.name} exited with {process.returncode}; see {log}")
        try:
            conn = await connect(port)
        except OSError:
            await asyncio.sleep(0.002)
            continue
        try:
            while time.perf_counter() < deadline:
                reply = await conn.exchange(models)
                if reply.ok:
                    return process, time.perf_counter() - began
                await asyncio.sleep(0.002)
        except OSError:
            pass
        finally:
            conn.close()
    stop(process)
    raise RuntimeError(f"{server.name} did not list {MODEL} within {START_TIMEOUT_S:g} s; see {log}")


# ---------------------------------------------------------------------------------------------
# Requests


def chat(port: int, stream: bool) -> Request:
    body: dict[str, Any] = {"model": MODEL, "messages": [{"role": "user", "content": MESSAGE}]}
    if stream:
        body["stream"] = True
    return post(port, "/v1/chat/completions", body, EXPECT_CHAT, headers=HEADERS)


def items(start: int, count: int) -> list[dict[str, str]]:
    return [{"type": "message", "role": "user" if index % 2 == 0 else "assistant", "content": "a b c"}
            for index in range(start, start + count)]


async def conversation_of(port: int, size: int) -> str:
    reply = await fetch(port, post(port, "/v1/conversations", {}, b'"conversation"', keep=True, headers=HEADERS))
    if not reply.ok:
        raise RuntimeError(f"creating a conversation failed with {reply.status}: {reply.body[:200]!r}")
    conversation_id: str = reply.json()["id"]
    appends = [post(port, f"/v1/conversations/{conversation_id}/items", {"items": items(start, PER_APPEND)},
                    b'"list"', headers=HEADERS) for start in range(0, size, PER_APPEND)]
    replies = await fetch_all(port, appends, 8)
    if sum(reply.ok for reply in replies) != len(appends):
        raise RuntimeError(f"appending {size} items to {conversation_id} failed")
    return conversation_id


# ---------------------------------------------------------------------------------------------
# One server's round


async def measure(server: Server, upstream_port: int, upstream_pid: int, options: argparse.Namespace,
                  logs: Path) -> dict[str, float]:
    port = free_port()
    process, started_s = await start(server, port, logs / f"{server.name}.log")
    try:
        await asyncio.sleep(1.0)
        measured: dict[str, float] = {"startup_s": started_s, "rss_mib": rss_mib(process.pid)}
        warmup = max(50, options.requests // 10)
        for stream in (False, True):
            with prompt_client(options.prompt_client) as prompt:
                measured["prompt_client"] = float(prompt)
                samples = await sample_interleaved(
                    {"upstream": (upstream_port, chat(upstream_port, stream)), "server": (port, chat(port, stream))},
                    options.requests, warmup, rounds=4,
                )
            if samples["server"].errors or samples["upstream"].errors:
                raise RuntimeError(f"{server.name}: errors in c=1 chat (stream={stream})")
            if stream:
                measured["stream_first_added_ms"] = (percentile(samples["server"].firsts, 0.5)
                                                     - percentile(samples["upstream"].firsts, 0.5))
            else:
                measured["plain_added_ms"] = (percentile(samples["server"].totals, 0.5)
                                              - percentile(samples["upstream"].totals, 0.5))
            measured |= tails("stream_first" if stream else "plain", samples["server"].firsts if stream else samples["server"].totals,
                              samples["upstream"].firsts if stream else samples["upstream"].totals)
        for kind, stream in (("plain", False), ("stream", True)):
            throughput = await measure_throughput(port, chat(port, stream), 32, options.duration, 2.0,
                                                  {"stack": process.pid, "upstream": upstream_pid})
            if throughput.errors:
                raise RuntimeError(f"{server.name}: {throughput.errors} errors at c=32 (stream={stream})")
            measured[f"{kind}_rps"] = throughput.rps
            measured[f"{kind}_cpu_us"] = cpu_per_request_us(throughput)
        measured["upstream_plain_rps"] = await upstream_alone(options, logs)  # the floor, in the same round
        return measured | await conversation_items(port, options, "items")
    finally:
        stop(process)


async def upstream_alone(options: argparse.Namespace, logs: Path) -> float:
    """The fake upstream's own plain chat rate at c=32 on the servers' core (a second instance, on
    core 0 alone as the servers are: the one on the client's core would be measured client-bound)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT / "tests"))
    alone = spawn([sys.executable, "-m", "fake_upstream", "--port", "0"], STACK_CORE, env, logs / "upstream-alone.log",
                  stdout=subprocess.PIPE)
    try:
        port = int(read_listening_url(alone).rsplit(":", 1)[1])
        measured = await measure_throughput(port, chat(port, False), 32, options.duration, 2.0, {"upstream": alone.pid})
        return measured.rps
    finally:
        stop(alone)


def tails(prefix: str, server: list[float], upstream: list[float]) -> dict[str, float]:
    """p99 and p99.9 at c=1, the server's and, for the ratio to the physical limit, the upstream's alone."""
    return {f"{prefix}_p99_ms": percentile(server, 0.99), f"{prefix}_p999_ms": percentile(server, 0.999),
            f"upstream_{prefix}_p99_ms": percentile(upstream, 0.99), f"upstream_{prefix}_p999_ms": percentile(upstream, 0.999)}


async def measure_production(server: Server, upstream_port: int, upstream_pid: int, options: argparse.Namespace,
                             logs: Path) -> dict[str, float]:
    """Each server as it runs in production: SMG with its log at info and its Prometheus metrics (always
    on here); the project with bench/chat-production-run.yaml (API keys, quotas in the process, metrics,
    a JSON access log, traces sampled at 10 % exported over OTLP). Plain chat at c=32, and added p50 at c=1."""
    port = free_port()
    process, _ = await start(server, port, logs / f"{server.name}-production.log")
    try:
        await asyncio.sleep(0.5)
        with prompt_client(options.prompt_client):
            samples = await sample_interleaved({"upstream": (upstream_port, chat(upstream_port, False)), "server": (port, chat(port, False))},
                                               options.requests, max(50, options.requests // 10), rounds=4)
        throughput = await measure_throughput(port, chat(port, False), 32, options.duration, 2.0, {"stack": process.pid, "upstream": upstream_pid})
        if throughput.errors or samples["server"].errors:
            raise RuntimeError(f"{server.name}: errors in the production rows")
        return {"prod_rps": throughput.rps, "prod_cpu_us": cpu_per_request_us(throughput),
                "prod_added_ms": percentile(samples["server"].totals, 0.5) - percentile(samples["upstream"].totals, 0.5)}
    finally:
        stop(process)


async def conversation_items(port: int, options: argparse.Namespace, prefix: str) -> dict[str, float]:
    """Create one item, and list 100, p50s in a conversation of CONVERSATION_SIZE items."""
    conversation_id = await conversation_of(port, CONVERSATION_SIZE)
    page = get(port, f"/v1/conversations/{conversation_id}/items?limit=100", b'"list"', headers=HEADERS)
    one = post(port, f"/v1/conversations/{conversation_id}/items", {"items": items(0, 1)}, b'"list"', headers=HEADERS)
    conversation = await sample_interleaved({"list": (port, page), "create": (port, one)},
                                            options.conversation_requests, 20, rounds=4)
    return {f"{prefix}_create_ms": percentile(conversation["create"].totals, 0.5),
            f"{prefix}_list_ms": percentile(conversation["list"].totals, 0.5)}


async def measure_durable(server: Server, logs: Path, options: argparse.Namespace) -> dict[str, float]:
    """The conversation item rows with the server keeping them in PostgreSQL."""
    port = free_port()
    process, _ = await start(server, port, logs / f"{server.name}-postgres.log")
    try:
        return await conversation_items(port, options, "pg_items")
    finally:
        stop(process)


# ---------------------------------------------------------------------------------------------
# Report

# (key, label, format, higher is better)
ROWS = [
    ("plain_rps", "chat non-streamed req/s at c=32", "{:,.0f}", True),
    ("plain_cpu_us", "  server CPU per request (µs)", "{:.0f}", False),
    ("stream_rps", "chat streamed (64 tokens) streams/s at c=32", "{:,.0f}", True),
    ("stream_cpu_us", "  server CPU per stream (µs)", "{:.0f}", False),
    ("plain_added_ms", "chat non-streamed added p50 at c=1 (ms)", "{:+.3f}", False),
    ("plain_p99_ms", "  p99 at c=1 (ms)", "{:.3f}", False),
    ("plain_p999_ms", "  p99.9 at c=1 (ms)", "{:.3f}", False),
    ("stream_first_added_ms", "chat stream first content added p50, c=1 (ms)", "{:+.3f}", False),
    ("stream_first_p99_ms", "  p99 at c=1 (ms)", "{:.3f}", False),
    ("stream_first_p999_ms", "  p99.9 at c=1 (ms)", "{:.3f}", False),
    ("prod_rps", "production configuration: chat req/s at c=32", "{:,.0f}", True),
    ("prod_cpu_us", "  server CPU per request (µs)", "{:.0f}", False),
    ("prod_added_ms", "  added p50 at c=1 (ms)", "{:+.3f}", False),
    ("items_create_ms", f"conversation items create at {CONVERSATION_SIZE:,} items (ms)", "{:.2f}", False),
    ("items_list_ms", f"conversation items list(100) at {CONVERSATION_SIZE:,} items (ms)", "{:.2f}", False),
    ("pg_items_create_ms", "  the same on PostgreSQL, both durable: create (ms)", "{:.2f}", False),
    ("pg_items_list_ms", "  on PostgreSQL: list(100) (ms)", "{:.2f}", False),
    ("startup_s", "start-up to the first answered /v1/models (s)", "{:.2f}", False),
    ("rss_mib", "idle RSS (MiB)", "{:.0f}", False),
]


def ratio(smg: float, project: float, higher_is_better: bool) -> float:
    """Above 1: the project is better. Added latencies are compared as they are (both above 0)."""
    if higher_is_better:
        return project / smg
    return smg / project if project > 0 else float("inf")


UPSTREAM = {"plain_rps": "upstream_plain_rps", "prod_rps": "upstream_plain_rps", "plain_p99_ms": "upstream_plain_p99_ms",
            "plain_p999_ms": "upstream_plain_p999_ms", "stream_first_p99_ms": "upstream_stream_first_p99_ms",
            "stream_first_p999_ms": "upstream_stream_first_p999_ms"}
"""The rows also compared with the upstream alone (the physical limit), measured in the same round."""


def report(runs: dict[str, list[dict[str, float]]]) -> str:
    rows = [("measure", "SMG", "project", "project vs SMG", "project vs upstream", "runs (SMG | project)")]
    for key, label, form, higher in ROWS:
        if not all(key in run for run in runs["SMG"] + runs["project"]):
            continue  # a row not measured this time (--no-postgres)
        smg = statistics.median(run[key] for run in runs["SMG"])
        project = statistics.median(run[key] for run in runs["project"])
        spread = " ".join(form.format(run[key]) for run in runs["SMG"]) + " | " + " ".join(
            form.format(run[key]) for run in runs["project"])
        floor = UPSTREAM.get(key)
        limit = (f"x{ratio(statistics.median(run[floor] for run in runs['project']), project, higher):.2f}"
                 if floor is not None and all(floor in run for run in runs["project"]) else "")
        rows.append((label, form.format(smg), form.format(project), f"x{ratio(smg, project, higher):.2f}", limit, spread))
    return table(rows)


# ---------------------------------------------------------------------------------------------
# Main


async def run(options: argparse.Namespace) -> dict[str, list[dict[str, float]]]:
    runs: dict[str, list[dict[str, float]]] = {"SMG": [], "project": []}
    with tempfile.TemporaryDirectory(prefix="stack-bench-smg-") as temp:
        logs = Path(temp)
        env = dict(os.environ, PYTHONPATH=str(ROOT / "tests"))
        upstream = spawn([sys.executable, "-m", "fake_upstream", "--port", "0"], UPSTREAM_CORE, env,
                         logs / "upstream.log", stdout=subprocess.PIPE)
        try:
            upstream_url = read_listening_url(upstream)
            upstream_port = int(upstream_url.rsplit(":", 1)[1])
            both = servers(upstream_url, logs / "state", options.smg_log_level)
            os.sched_setaffinity(0, {CLIENT_CORE})
            for round_index in range(options.rounds):
                for server in both if round_index % 2 == 0 else reversed(both):
                    progress(f"round {round_index + 1}: {server.name}")
                    runs[server.name].append(await measure(server, upstream_port, upstream.pid, options, logs))
                    if options.production:
                        production = next(one for one in production_servers(upstream_url, logs / "state-production")
                                          if one.name == server.name)
                        runs[server.name][-1] |= await measure_production(production, upstream_port, upstream.pid, options, logs)
                    if options.postgres:
                        async with fresh_database(options.postgres) as dsn:
                            durable = next(one for one in servers(upstream_url, logs / "state-pg", options.smg_log_level, dsn)
                                           if one.name == server.name)
                            runs[server.name][-1] |= await measure_durable(durable, logs, options)
        except Exception:
            for log in sorted(logs.glob("*.log")):
                sys.stderr.write(f"--- {log.name} (tail)\n{log.read_text(errors='replace')[-2000:]}\n")
            raise
        finally:
            stop(upstream)
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2, help="rounds; each starts each server afresh")
    parser.add_argument("--duration", type=float, default=8.0, help="seconds of the c=32 window")
    parser.add_argument("--requests", type=int, default=1_000, help="c=1 requests per latency measure")
    parser.add_argument("--conversation-requests", type=int, default=400, help="creates and lists measured")
    parser.add_argument("--smg-log-level", default="warn", choices=["debug", "info", "warn", "error"])
    parser.add_argument("--no-prompt-client", dest="prompt_client", action="store_false",
                        help="time the c=1 chat rows at the client's normal priority (as before 2026-11-24)")
    parser.add_argument("--postgres", default=ADMIN_DSN, metavar="ADMIN_DSN",
                        help="the PostgreSQL server of the durable item rows, by an admin DSN (default: %(default)s)")
    parser.add_argument("--no-postgres", dest="postgres", action="store_const", const=None,
                        help="leave out the PostgreSQL rows")
    parser.add_argument("--no-production", dest="production", action="store_false",
                        help="leave out the production rows (logs, metrics, auth, quotas, traces on)")
    parser.add_argument("--json", type=Path, dest="json_path", help="also write each round's numbers here")
    options = parser.parse_args()
    import uvloop

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwinds, so that the servers are stopped
    compile_project()
    runs = uvloop.run(run(options))
    print(f"SMG {SMG_VERSION} against the project, one core each (core {STACK_CORE}), "
          f"{options.rounds} rounds, {time.strftime('%Y-%m-%d')}; the c=1 chat rows timed with the client at "
          f"{'real-time' if all(run['prompt_client'] for run in runs['project'] + runs['SMG']) else 'normal'} priority\n")
    print(report(runs))
    if options.json_path:
        import json

        options.json_path.write_text(json.dumps({"options": vars(options) | {"json_path": str(options.json_path)},
                                                 "runs": runs}, indent=2) + "\n")


if __name__ == "__main__":
    main()
