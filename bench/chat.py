"""Chat-completions hot path: what the stack adds in front of its upstream.

Starts the fake upstream (tests/fake_upstream) and `stack run bench/chat-run.yaml` in front of it,
drives both with a raw-asyncio HTTP/1.1 keep-alive client, and prints latency at concurrency 1
and throughput at concurrency 32, plain and streamed, the upstream (the floor) beside the stack.

    .venv/bin/python bench/chat.py [--requests 2000] [--duration 10] [--concurrency 32]
                                   [--only plain|stream] [--json PATH] [--check-client]

Cores (2-core machine): the stack server alone on core 0; the fake upstream and this load
generator on core 1. `--check-client` starts no stack: it puts the fake upstream on core 0 and
shows how fast the load generator drives it from core 1 (it should be well above 5,000 req/s).
Targets: plain c=32 >= 2,000 req/s, streamed c=32 >= 500 req/s, added p50 at c=1 < 1 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, cast

import uvloop

ROOT = Path(__file__).resolve().parent.parent
STACK = str(Path(sys.executable).with_name("stack"))
RUN_YAML = ROOT / "bench" / "chat-run.yaml"
HOST = "127.0.0.1"
MODEL = "fake-model"
MESSAGE = "[tokens:64] benchmark"
EXPECT_CHAT = b"tok64"  # the last token of the 64-token answer
EXPECT_MODELS = MODEL.encode()
STACK_CORE, UPSTREAM_CORE, CLIENT_CORE = 0, 1, 1

TARGET_PLAIN_RPS = 2_000.0
TARGET_STREAM_RPS = 500.0
TARGET_ADDED_P50_MS = 1.0

REQUEST_TIMEOUT_S = 10.0
LATENCY_LIMIT_S = 60.0  # per c=1 measurement
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
LATENCY_WARMUP = 200
THROUGHPUT_WARMUP_S = 2.0
FIRST_CONTENT = re.compile(rb'"content":\s*"[^"]')  # a delta with non-empty content
DONE = b"data: [DONE]"


# ---------------------------------------------------------------------------------------------
# The load generator: a minimal HTTP/1.1 keep-alive client on an asyncio Protocol


@dataclass(frozen=True, slots=True)
class Request:
    """One prebuilt request: its bytes, whether the answer streams, what a good body contains."""

    raw: bytes
    stream: bool
    expect: bytes


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    ok: bool
    started: float
    first: float | None  # when the first SSE event carrying content arrived (streams)
    ended: float

    @property
    def total_s(self) -> float:
        return self.ended - self.started


def post(port: int, path: str, body: dict[str, Any], expect: bytes) -> Request:
    payload = json.dumps(body, separators=(",", ":")).encode()
    head = (
        f"POST {path} HTTP/1.1\r\nhost: {HOST}:{port}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(payload)}\r\n\r\n"
    )
    return Request(head.encode() + payload, bool(body.get("stream")), expect)


def get(port: int, path: str, expect: bytes) -> Request:
    return Request(f"GET {path} HTTP/1.1\r\nhost: {HOST}:{port}\r\n\r\n".encode(), False, expect)


def chat_request(port: int, stream: bool) -> Request:
    body: dict[str, Any] = {"model": MODEL, "messages": [{"role": "user", "content": MESSAGE}]}
    if stream:
        body["stream"] = True
    return post(port, "/v1/chat/completions", body, EXPECT_CHAT)


_HEAD, _LENGTH, _CHUNKS, _TRAILER = range(4)


def chunk_size(line: bytearray) -> int:
    """The size on a chunk's size line (hex, maybe followed by `;extensions`)."""
    return int(line.split(b";", 1)[0] if b";" in line else line, 16)


class HttpConnection(asyncio.Protocol):
    """One keep-alive connection, one request at a time; `exchange` answers with a Reply.

    The body is not kept: each piece of it (a content-length body, or one chunk) is searched in
    place for what the request expects, and for streams for the first content event and [DONE].
    An SSE event split across two chunks would be missed; uvicorn sends one event per chunk.
    """

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.pos = 0  # parsed up to here
        self.waiter: asyncio.Future[Reply] | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.request = Request(b"", False, b"")
        self.state = _HEAD
        self.remaining = 0
        self.status = 0
        self.started = 0.0
        self.first: float | None = None
        self.seen_expect = self.seen_done = False
        self.closing = False

    # -- asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's are not asyncio.Transport subclasses
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        self._fail(ConnectionError(f"connection lost: {exc}"))

    def data_received(self, data: bytes) -> None:
        if self.pos:
            del self.buffer[: self.pos]
            self.pos = 0
        self.buffer += data
        try:
            while self.waiter is not None and self._step():
                pass
        except ValueError as error:  # a malformed response: give up on this connection
            self._fail(ConnectionError(f"bad response: {error}"))
            self.close()

    # -- use
    def exchange(self, request: Request) -> asyncio.Future[Reply]:
        assert self.transport is not None and self.waiter is None
        self.request, self.state, self.first = request, _HEAD, None
        self.seen_expect = self.seen_done = False
        self.waiter = self.loop.create_future()
        self.timer = self.loop.call_later(REQUEST_TIMEOUT_S, self._time_out)
        self.started = time.perf_counter()
        self.transport.write(request.raw)
        return self.waiter

    def close(self) -> None:
        self.closing = True
        if self.transport is not None:
            self.transport.close()

    # -- parsing
    def _step(self) -> bool:
        """Advance the parser by one element; False when it needs more bytes."""
        buffer, pos = self.buffer, self.pos
        if self.state == _HEAD:
            end = buffer.find(b"\r\n\r\n", pos)
            if end < 0:
                return False
            self._head(bytes(buffer[pos:end]))
            self.pos = end + 4
        elif self.state == _LENGTH:
            end = pos + self.remaining
            if len(buffer) < end:
                return False
            self._data(pos, end)
            self.pos = end
            self._finish()
        elif self.state == _CHUNKS:
            return self._chunks()
        else:  # _TRAILER: header lines until an empty one
            end = buffer.find(b"\r\n", pos)
            if end < 0:
                return False
            self.pos = end + 2
            if end == pos:
                self._finish()
        return True

    def _chunks(self) -> bool:
        """Skip over every complete chunk in the buffer, then search their bytes in one go.

        True when the last (empty) chunk was reached. The span searched includes the chunks'
        size lines, which cannot fake a match: an SSE event never spans two chunks here.
        """
        buffer, start = self.buffer, self.pos
        pos, size, available = start, -1, len(buffer)
        while (end := buffer.find(b"\r\n", pos)) >= 0:
            size = chunk_size(buffer[pos:end])
            if size == 0 or available < end + size + 4:
                break
            pos = end + size + 4
        if pos > start:
            self._data(start, pos)
        if size == 0:
            self.state, self.pos = _TRAILER, end + 2
            return True
        self.pos = pos
        return False

    def _head(self, head: bytes) -> None:
        lines = head.split(b"\r\n")
        self.status = int(lines[0].split(b" ", 2)[1])
        length, chunked = 0, False
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"transfer-encoding":
                chunked = b"chunked" in value.lower()
            elif name == b"connection" and b"close" in value.lower():
                self.closing = True
        if chunked:
            self.state = _CHUNKS
        else:
            self.state, self.remaining = _LENGTH, length

    def _data(self, start: int, end: int) -> None:
        buffer, request = self.buffer, self.request
        if not self.seen_expect and buffer.find(request.expect, start, end) >= 0:
            self.seen_expect = True
        if request.stream:
            if self.first is None and FIRST_CONTENT.search(buffer, start, end):
                self.first = time.perf_counter()
            if buffer.find(DONE, start, end) >= 0:
                self.seen_done = True

    def _finish(self) -> None:
        ended = time.perf_counter()
        ok = self.status == 200 and self.seen_expect
        if self.request.stream:
            ok = ok and self.first is not None and self.seen_done
        self.state = _HEAD
        self._settle(lambda waiter: waiter.set_result(Reply(self.status, ok, self.started, self.first, ended)))
        if self.closing:
            self.close()

    def _time_out(self) -> None:
        self.timer = None
        self._fail(TimeoutError(f"no complete answer in {REQUEST_TIMEOUT_S} s"))
        self.close()

    def _fail(self, error: Exception) -> None:
        self._settle(lambda waiter: waiter.set_exception(error))

    def _settle(self, settle: Callable[[asyncio.Future[Reply]], None]) -> None:
        waiter, self.waiter = self.waiter, None
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if waiter is not None and not waiter.done():
            settle(waiter)


async def connect(port: int) -> HttpConnection:
    _, protocol = await asyncio.get_running_loop().create_connection(HttpConnection, HOST, port)
    return protocol


# ---------------------------------------------------------------------------------------------
# Measurements


def percentile(values: list[float], q: float) -> float:
    """The q-quantile (0..1) of `values`, nearest rank; NaN when empty."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


@dataclass
class Latency:
    """Concurrency 1: milliseconds per request over the `count` good answers."""

    count: int
    errors: int
    p50_ms: float
    p99_ms: float
    first_p50_ms: float | None = None  # streams: time to the first content chunk


@dataclass
class Throughput:
    """Concurrency N over a fixed window: requests/s, errors, and the client's CPU per request."""

    concurrency: int
    duration_s: float
    completed: int
    errors: int
    rps: float
    p50_ms: float
    p99_ms: float
    client_cpu_us: float  # this process's CPU time per completed request
    cpu_percent: dict[str, float]  # per process (client, upstream, stack), percent of one core


async def measure_latency(port: int, request: Request, count: int, warmup: int) -> Latency:
    """`warmup` then `count` requests one after another on one connection (at most LATENCY_LIMIT_S)."""
    totals: list[float] = []
    firsts: list[float] = []
    errors = 0
    deadline = time.perf_counter() + LATENCY_LIMIT_S
    conn = await connect(port)
    for index in range(warmup + count):
        if time.perf_counter() > deadline:
            errors += warmup + count - index  # not measured: counted as failed
            break
        try:
            reply: Reply | None = await conn.exchange(request)
        except OSError:  # reset, or timed out
            reply = None
        if conn.closing:
            conn = await connect(port)
        if index < warmup:
            continue
        if reply is None or not reply.ok:
            errors += 1
            continue
        totals.append(reply.total_s * 1000)
        if reply.first is not None:
            firsts.append((reply.first - reply.started) * 1000)
    conn.close()
    first_p50 = percentile(firsts, 0.5) if request.stream else None
    return Latency(len(totals), errors, percentile(totals, 0.5), percentile(totals, 0.99), first_p50)


@dataclass
class _Window:
    start: float
    stop: float
    completed: int = 0
    errors: int = 0
    latencies: list[float] = field(default_factory=list)

    def record(self, reply: Reply | None, at: float) -> None:
        if not self.start <= at < self.stop:
            return
        if reply is None or not reply.ok:
            self.errors += 1
        else:
            self.completed += 1
            self.latencies.append(reply.total_s * 1000)


async def _worker(port: int, request: Request, window: _Window) -> None:
    conn: HttpConnection | None = None
    try:
        while time.perf_counter() < window.stop:
            reply: Reply | None = None
            try:
                if conn is None or conn.closing:
                    conn = await connect(port)
                reply = await conn.exchange(request)
            except OSError:  # refused, reset, or timed out
                await asyncio.sleep(0.01)  # refused or reset: count it, do not spin
            window.record(reply, time.perf_counter())
    finally:
        if conn is not None:
            conn.close()


async def measure_throughput(
    port: int, request: Request, concurrency: int, duration: float, warmup: float, pids: dict[str, int]
) -> Throughput:
    """`concurrency` connections in a loop; counts what completes within the window after `warmup`."""
    begin = time.perf_counter()
    window = _Window(begin + warmup, begin + warmup + duration)
    sampler = asyncio.create_task(sample_cpu({"client": os.getpid(), **pids}, warmup, duration))
    tasks = [asyncio.create_task(_worker(port, request, window)) for _ in range(concurrency)]
    _, stuck = await asyncio.wait(tasks, timeout=warmup + duration + REQUEST_TIMEOUT_S + 1)
    for task in stuck:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    cpu = await sampler
    return Throughput(
        concurrency=concurrency,
        duration_s=duration,
        completed=window.completed,
        errors=window.errors + len(stuck),
        rps=window.completed / duration,
        p50_ms=percentile(window.latencies, 0.5),
        p99_ms=percentile(window.latencies, 0.99),
        client_cpu_us=cpu["client"] / 100 * duration / max(1, window.completed) * 1e6,
        cpu_percent=cpu,
    )


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of process `pid` (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


async def sample_cpu(pids: dict[str, int], warmup: float, duration: float) -> dict[str, float]:
    """Each process's CPU use over the window, in percent of one core."""
    await asyncio.sleep(warmup)
    before, started = {name: cpu_seconds(pid) for name, pid in pids.items()}, time.perf_counter()
    await asyncio.sleep(duration)
    after, elapsed = {name: cpu_seconds(pid) for name, pid in pids.items()}, time.perf_counter() - started
    return {name: round(100 * (after[name] - before[name]) / elapsed, 1) for name in pids}


async def wait_healthy(port: int, path: str, process: subprocess.Popen[bytes]) -> None:
    """Poll GET `path` until a 200; RuntimeError if the process exits or START_TIMEOUT_S passes."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the stack server exited with {process.returncode}")
        with contextlib.suppress(OSError):
            conn = await connect(port)
            reply = await conn.exchange(get(port, path, b""))
            conn.close()
            if reply.status == 200:
                return
        await asyncio.sleep(0.05)
    raise RuntimeError(f"no 200 on {path} from the stack server within {START_TIMEOUT_S:g} s")


# ---------------------------------------------------------------------------------------------
# Processes


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def spawn(
    argv: list[str], core: int, env: dict[str, str], log: Path, stdout: int | None = None
) -> subprocess.Popen[bytes]:
    """Start `argv` pinned to `core`, in its own session (Ctrl-C reaches only the bench)."""
    with log.open("ab") as sink:
        return subprocess.Popen(
            ["taskset", "-c", str(core), *argv], cwd=ROOT, env=env, start_new_session=True,
            stdin=subprocess.DEVNULL, stdout=stdout if stdout is not None else sink, stderr=sink,
        )


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    if process.stdout is not None:
        process.stdout.close()


def read_listening_url(process: subprocess.Popen[bytes]) -> str:
    """The URL from the fake upstream's `listening on URL` line (read unbuffered, with a deadline)."""
    assert process.stdout is not None
    fd = process.stdout.fileno()
    deadline = time.monotonic() + START_TIMEOUT_S
    output = b""
    while b"\n" not in output:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            raise RuntimeError("the fake upstream did not start")
        data = os.read(fd, 4096)
        if not data:
            raise RuntimeError(f"the fake upstream exited with {process.wait()}")
        output += data
    return output.decode().split("listening on ", 1)[1].split()[0]


@dataclass
class Servers:
    upstream: subprocess.Popen[bytes]
    upstream_port: int
    stack: subprocess.Popen[bytes] | None = None
    stack_port: int = 0

    @property
    def pids(self) -> dict[str, int]:
        """The server processes whose CPU use is sampled during throughput runs."""
        pids = {"upstream": self.upstream.pid}
        if self.stack is not None:
            pids["stack"] = self.stack.pid
        return pids


@contextlib.contextmanager
def running_servers(with_stack: bool, upstream_core: int) -> Iterator[Servers]:
    """The fake upstream and (if `with_stack`) the stack in front of it; stopped on exit."""
    processes: list[subprocess.Popen[bytes]] = []
    with tempfile.TemporaryDirectory(prefix="stack-bench-chat-") as temp:
        logs = Path(temp)
        try:
            env = dict(os.environ, PYTHONPATH=str(ROOT / "tests"))
            upstream = spawn([sys.executable, "-m", "fake_upstream", "--port", "0"], upstream_core, env,
                             logs / "upstream.log", stdout=subprocess.PIPE)
            processes.append(upstream)
            upstream_url = read_listening_url(upstream)
            servers = Servers(upstream, int(upstream_url.rsplit(":", 1)[1]))
            if with_stack:
                servers.stack_port = free_port()
                stack_env = dict(
                    os.environ, BENCH_UPSTREAM_URL=f"{upstream_url}/v1", BENCH_STATE_DIR=str(logs / "state"),
                    STACK_RECORDING_MODE="live", STACK_LOG_LEVEL="WARNING",
                )
                servers.stack = spawn([STACK, "run", str(RUN_YAML), "--port", str(servers.stack_port)],
                                      STACK_CORE, stack_env, logs / "stack.log")
                processes.append(servers.stack)
            yield servers
        except Exception:
            for name in ("upstream.log", "stack.log"):
                with contextlib.suppress(OSError):
                    sys.stderr.write(f"--- {name} (tail)\n{(logs / name).read_text()[-2000:]}\n")
            raise
        finally:
            for process in reversed(processes):
                stop(process)


# ---------------------------------------------------------------------------------------------
# The run


@dataclass
class Options:
    requests: int
    duration: float
    concurrency: int
    only: str | None
    json_path: Path | None
    check_client: bool


def kinds(options: Options) -> list[str]:
    return [options.only] if options.only else ["plain", "stream"]


async def run_bench(options: Options, servers: Servers) -> dict[str, Any]:
    """Every measurement, each against the upstream and then through the stack."""
    assert servers.stack is not None
    await wait_healthy(servers.stack_port, "/v1/health", servers.stack)
    ports = {"upstream": servers.upstream_port, "stack": servers.stack_port}
    c = options.concurrency
    results: dict[str, Any] = {}
    for kind in kinds(options):
        stream = kind == "stream"
        results[f"{kind}_c1"] = {
            side: asdict(await measure_latency(port, chat_request(port, stream), options.requests, LATENCY_WARMUP))
            for side, port in ports.items()
        }
        progress(f"{kind} c=1 done")
        results[f"{kind}_c{c}"] = {
            side: asdict(await measure_throughput(port, chat_request(port, stream), c, options.duration,
                                                  THROUGHPUT_WARMUP_S, servers.pids))
            for side, port in ports.items()
        }
        progress(f"{kind} c={c} done")
    models = get(servers.stack_port, "/v1/models", EXPECT_MODELS)
    measured = await measure_throughput(servers.stack_port, models, c, options.duration, THROUGHPUT_WARMUP_S,
                                        servers.pids)
    results[f"models_c{c}"] = {"stack": asdict(measured)}
    return results


async def run_check_client(options: Options, servers: Servers) -> dict[str, Any]:
    """The load generator against the fake upstream alone (on the other core)."""
    port = servers.upstream_port
    results: dict[str, Any] = {}
    for name, request in [("plain", chat_request(port, False)), ("stream", chat_request(port, True)),
                          ("models", get(port, "/v1/models", EXPECT_MODELS))]:
        measured = await measure_throughput(port, request, options.concurrency, options.duration,
                                            THROUGHPUT_WARMUP_S, servers.pids)
        results[f"{name}_c{options.concurrency}"] = {"upstream": asdict(measured)}
    return results


def progress(message: str) -> None:
    print(f"  ... {message}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# Report

Row = tuple[str, ...]


def verdict(ok: bool) -> str:
    return "ok" if ok else "MISSED"


def latency_rows(kind: str, pair: dict[str, Any]) -> list[Row]:
    up, st = pair["upstream"], pair["stack"]
    rows: list[Row] = []
    measures = [("p50", "p50_ms"), ("p99", "p99_ms")]
    if kind == "stream":
        measures.append(("p50 first content", "first_p50_ms"))
    for label, key in measures:
        added = st[key] - up[key]
        target = ""
        if key == "p50_ms":
            target = f"added < {TARGET_ADDED_P50_MS:g} ms  {verdict(added < TARGET_ADDED_P50_MS)}"
        rows.append((f"c=1 {kind} {label}", f"{up[key]:.3f} ms", f"{st[key]:.3f} ms", f"{added:+.3f} ms", target))
    if up["errors"] or st["errors"]:
        rows.append((f"c=1 {kind} errors", str(up["errors"]), str(st["errors"]), "", ""))
    return rows


def throughput_cell(measured: dict[str, Any] | None) -> str:
    return "-" if measured is None else f"{measured['rps']:,.0f}/s ({measured['errors']} err)"


def throughput_row(label: str, pair: dict[str, Any], target: float | None) -> Row:
    up, stack = pair.get("upstream"), pair.get("stack")
    mark = ""
    if target is not None and stack is not None:
        mark = f">= {target:,.0f}/s  {verdict(stack['rps'] >= target and stack['errors'] == 0)}"
    ratio = f"x{stack['rps'] / up['rps']:.2f}" if up and stack and up["rps"] else ""
    return (label, throughput_cell(up), throughput_cell(stack), ratio, mark)


def table(rows: list[Row]) -> str:
    """Left-aligned first and last columns, right-aligned others, a rule under the header."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    last = len(widths) - 1
    lines = ["  ".join(cell.ljust(widths[i]) if i in (0, last) else cell.rjust(widths[i])
                       for i, cell in enumerate(row)).rstrip() for row in rows]
    lines.insert(1, "-" * max(len(line) for line in lines))
    return "\n".join(lines)


def report(results: dict[str, Any], options: Options) -> str:
    c = options.concurrency
    rows: list[Row] = [("measure", "upstream", "stack", "added", "target")]
    targets = {"plain": TARGET_PLAIN_RPS, "stream": TARGET_STREAM_RPS}
    for kind in kinds(options):
        rows += latency_rows(kind, results[f"{kind}_c1"])
        rows.append(throughput_row(f"c={c} {kind} req/s", results[f"{kind}_c{c}"], targets[kind]))
    rows.append(throughput_row(f"c={c} GET /v1/models req/s", results[f"models_c{c}"], None))
    return table(rows)


def cpu_report(results: dict[str, Any], upstream_core: int) -> str:
    """CPU use of each process during each throughput window, to tell which core was the limit."""
    rows: list[Row] = [("CPU in the throughput windows", f"stack (core {STACK_CORE})",
                        f"upstream (core {upstream_core})", f"bench (core {CLIENT_CORE})",
                        "stack us/req", "bench us/req")]
    for name, pair in results.items():
        for side, measured in pair.items():
            cpu = measured.get("cpu_percent")
            if cpu is None:
                continue
            stack_us = cpu.get("stack", 0) / 100 * measured["duration_s"] / max(1, measured["completed"]) * 1e6
            rows.append((f"{name} via {side}", f"{cpu.get('stack', 0):.0f}%", f"{cpu['upstream']:.0f}%",
                         f"{cpu['client']:.0f}%", f"{stack_us:.0f}" if side == "stack" else "-",
                         f"{measured['client_cpu_us']:.0f}"))
    return table(rows)


def check_report(results: dict[str, Any]) -> str:
    rows: list[Row] = [("load generator -> fake upstream", "req/s", "errors", "bench us/req")]
    for name, pair in results.items():
        measured = pair["upstream"]
        rows.append((name, f"{measured['rps']:,.0f}", str(measured["errors"]), f"{measured['client_cpu_us']:.0f}"))
    return table(rows)


def header(options: Options) -> str:
    if options.check_client:
        return (f"load generator check: fake upstream on core 0, this client on core {CLIENT_CORE}, "
                f"c={options.concurrency}, {options.duration:g} s window after {THROUGHPUT_WARMUP_S:g} s warm-up")
    return (f"chat completions, model {MODEL}, message {MESSAGE!r} (64-token answer)\n"
            f"stack on core {STACK_CORE}; fake upstream and this load generator on core {UPSTREAM_CORE}\n"
            f"c=1: {options.requests} requests after {LATENCY_WARMUP} warm-up; "
            f"c={options.concurrency}: {options.duration:g} s after {THROUGHPUT_WARMUP_S:g} s warm-up")


def write_json(path: Path, options: Options, results: dict[str, Any], load: tuple[float, float],
               upstream_core: int) -> None:
    document = {
        "options": {key: str(value) if isinstance(value, Path) else value for key, value in asdict(options).items()},
        "cores": {"stack": STACK_CORE, "upstream": upstream_core, "client": CLIENT_CORE},
        "targets": {"plain_rps": TARGET_PLAIN_RPS, "stream_rps": TARGET_STREAM_RPS,
                    "added_p50_ms": TARGET_ADDED_P50_MS},
        "load_average_before_after": load,
        "results": results,
    }
    path.write_text(json.dumps(document, indent=2) + "\n")


# ---------------------------------------------------------------------------------------------
# Entry point


def parse_args() -> Options:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=2_000, help="c=1 requests measured (after 200 warm-up)")
    parser.add_argument("--duration", type=float, default=10.0,
                        help="seconds per throughput window (after 2 s warm-up)")
    parser.add_argument("--concurrency", type=int, default=32, help="connections in the throughput runs")
    parser.add_argument("--only", choices=["plain", "stream"], help="only plain or only streamed chat")
    parser.add_argument("--json", type=Path, dest="json_path", help="also write the numbers here")
    parser.add_argument("--check-client", action="store_true",
                        help="only the load generator against the fake upstream, on separate cores")
    args = parser.parse_args()
    return Options(args.requests, args.duration, args.concurrency, args.only, args.json_path, args.check_client)


def main() -> None:
    options = parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwinds, so that the servers are stopped
    began, load_before = time.perf_counter(), os.getloadavg()[0]
    upstream_core = 0 if options.check_client else UPSTREAM_CORE
    try:
        with running_servers(not options.check_client, upstream_core) as servers:
            os.sched_setaffinity(0, {CLIENT_CORE})
            runner = run_check_client if options.check_client else run_bench
            results = uvloop.run(runner(options, servers))
    except KeyboardInterrupt:
        print("interrupted; the servers are stopped", file=sys.stderr)
        sys.exit(130)
    load = (load_before, os.getloadavg()[0])
    print(header(options))
    print()
    print(check_report(results) if options.check_client else report(results, options))
    print()
    print(cpu_report(results, upstream_core))
    print(f"\nload average (1 min) before/after: {load[0]:.2f}/{load[1]:.2f}; "
          f"took {time.perf_counter() - began:.0f} s")
    if options.json_path is not None:
        write_json(options.json_path, options, results, load, upstream_core)


if __name__ == "__main__":
    main()
