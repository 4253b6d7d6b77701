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


_HEAD, _LENGTH, _CHUNK_SIZE, _CHUNK_DATA, _TRAILER = range(5)


class HttpConnection(asyncio.Protocol):
    """One keep-alive connection, one request at a time; `exchange` answers with a Reply."""

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.body = bytearray()
        self.waiter: asyncio.Future[Reply] | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.request = Request(b"", False, b"")
        self.state = _HEAD
        self.remaining = 0
        self.status = 0
        self.started = 0.0
        self.first: float | None = None
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
        self.buffer += data
        try:
            self._parse()
        except ValueError as error:  # a malformed response: give up on this connection
            self._fail(ConnectionError(f"bad response: {error}"))
            self.close()

    # -- use
    def exchange(self, request: Request) -> asyncio.Future[Reply]:
        assert self.transport is not None and self.waiter is None
        self.request, self.state, self.first = request, _HEAD, None
        self.body.clear()
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
    def _parse(self) -> None:
        while self.waiter is not None:
            if not self._step():
                return

    def _step(self) -> bool:
        """Advance the parser by one element; False when it needs more bytes."""
        buffer = self.buffer
        if self.state == _HEAD:
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                return False
            self._head(bytes(buffer[:end]))
            del buffer[: end + 4]
        elif self.state == _LENGTH:
            if len(buffer) < self.remaining:
                return False
            self._data(buffer[: self.remaining])
            del buffer[: self.remaining]
            self._finish()
        elif self.state == _CHUNK_SIZE:
            end = buffer.find(b"\r\n")
            if end < 0:
                return False
            size = int(bytes(buffer[:end]).split(b";", 1)[0], 16)
            del buffer[: end + 2]
            self.state, self.remaining = (_TRAILER, 0) if size == 0 else (_CHUNK_DATA, size)
        elif self.state == _CHUNK_DATA:
            if len(buffer) < self.remaining + 2:
                return False
            self._data(buffer[: self.remaining])
            del buffer[: self.remaining + 2]
            self.state = _CHUNK_SIZE
        else:  # _TRAILER: header lines until an empty one
            end = buffer.find(b"\r\n")
            if end < 0:
                return False
            del buffer[: end + 2]
            if end == 0:
                self._finish()
        return True

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
            self.state = _CHUNK_SIZE
        else:
            self.state, self.remaining = _LENGTH, length

    def _data(self, data: bytearray) -> None:
        scan_from = max(0, len(self.body) - 16)
        self.body += data
        if self.request.stream and self.first is None and FIRST_CONTENT.search(self.body, scan_from):
            self.first = time.perf_counter()

    def _finish(self) -> None:
        ended = time.perf_counter()
        body, request = self.body, self.request
        ok = self.status == 200 and request.expect in body
        if request.stream:
            ok = ok and self.first is not None and DONE in body[-32:]
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
    """Concurrency 1: milliseconds per request over `count` requests."""

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


async def measure_latency(port: int, request: Request, count: int, warmup: int) -> Latency:
    totals: list[float] = []
    firsts: list[float] = []
    errors = 0
    conn = await connect(port)
    for index in range(warmup + count):
        try:
            reply = await conn.exchange(request)
        except (ConnectionError, TimeoutError):
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
    return Latency(count, errors, percentile(totals, 0.5), percentile(totals, 0.99), first_p50)


@dataclass
class _Window:
    start: float
    stop: float
    completed: int = 0
    errors: int = 0
    exchanges: int = 0
    latencies: list[float] = field(default_factory=list)

    def record(self, reply: Reply | None, at: float) -> None:
        self.exchanges += 1
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
            except (OSError, TimeoutError):
                await asyncio.sleep(0.01)  # refused or reset: count it, do not spin
            window.record(reply, time.perf_counter())
    finally:
        if conn is not None:
            conn.close()


async def measure_throughput(
    port: int, request: Request, concurrency: int, duration: float, warmup: float
) -> Throughput:
    begin = time.perf_counter()
    window = _Window(begin + warmup, begin + warmup + duration)
    cpu_begin = time.process_time()
    tasks = [asyncio.create_task(_worker(port, request, window)) for _ in range(concurrency)]
    _, stuck = await asyncio.wait(tasks, timeout=warmup + duration + REQUEST_TIMEOUT_S + 1)
    for task in stuck:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    cpu = time.process_time() - cpu_begin
    return Throughput(
        concurrency=concurrency,
        duration_s=duration,
        completed=window.completed,
        errors=window.errors + len(stuck),
        rps=window.completed / duration,
        p50_ms=percentile(window.latencies, 0.5),
        p99_ms=percentile(window.latencies, 0.99),
        client_cpu_us=cpu / max(1, window.exchanges) * 1e6,
    )


async def wait_healthy(port: int, path: str, process: subprocess.Popen[bytes]) -> None:
    """Poll GET `path` until a 200; RuntimeError if the process exits or START_TIMEOUT_S passes."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{process.args} exited with {process.returncode}")
        with contextlib.suppress(OSError, TimeoutError):
            conn = await connect(port)
            reply = await conn.exchange(get(port, path, b""))
            conn.close()
            if reply.status == 200:
                return
        await asyncio.sleep(0.05)
    raise RuntimeError(f"no 200 on {path} from {process.args} within {START_TIMEOUT_S} s")


# ---------------------------------------------------------------------------------------------
# Processes


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def spawn(argv: list[str], core: int, env: dict[str, str], log: Path, stdout: int | None = None) -> subprocess.Popen[bytes]:
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
    """The URL from the fake upstream's `listening on URL` line."""
    assert process.stdout is not None
    deadline = time.monotonic() + START_TIMEOUT_S
    line = b""
    while not line.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([process.stdout], [], [], left)[0]:
            raise RuntimeError("the fake upstream did not start")
        byte = process.stdout.read(1)
        if not byte:
            raise RuntimeError(f"the fake upstream exited with {process.wait()}")
        line += byte
    return line.decode().split("listening on ", 1)[1].strip()


@dataclass
class Servers:
    upstream_port: int
    stack_port: int | None
    stack: subprocess.Popen[bytes] | None


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
            upstream_port = int(upstream_url.rsplit(":", 1)[1])
            if not with_stack:
                yield Servers(upstream_port, None, None)
                return
            stack_port = free_port()
            stack_env = dict(
                os.environ, BENCH_UPSTREAM_URL=f"{upstream_url}/v1", BENCH_STATE_DIR=str(logs / "state"),
                STACK_RECORDING_MODE="live", STACK_LOG_LEVEL="WARNING",
            )
            server = spawn([STACK, "run", str(RUN_YAML), "--port", str(stack_port)], STACK_CORE, stack_env,
                           logs / "stack.log")
            processes.append(server)
            yield Servers(upstream_port, stack_port, server)
        except BaseException:
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


async def run_pair(measure: Callable[[int], Any], servers: Servers) -> dict[str, Any]:
    """One measurement against the upstream, then the same through the stack."""
    upstream = await measure(servers.upstream_port)
    assert servers.stack_port is not None
    stack = await measure(servers.stack_port)
    return {"upstream": asdict(upstream), "stack": asdict(stack)}


async def run_bench(options: Options, servers: Servers) -> dict[str, Any]:
    assert servers.stack_port is not None and servers.stack is not None
    await wait_healthy(servers.stack_port, "/v1/health", servers.stack)
    results: dict[str, Any] = {}
    for kind in kinds(options):
        stream = kind == "stream"

        def latency(port: int, stream: bool = stream) -> Any:
            return measure_latency(port, chat_request(port, stream), options.requests, LATENCY_WARMUP)

        def throughput(port: int, stream: bool = stream) -> Any:
            return measure_throughput(port, chat_request(port, stream), options.concurrency,
                                      options.duration, THROUGHPUT_WARMUP_S)

        results[f"{kind}_c1"] = await run_pair(latency, servers)
        results[f"{kind}_c{options.concurrency}"] = await run_pair(throughput, servers)
        progress(f"{kind}: done")
    models = get(servers.stack_port, "/v1/models", EXPECT_MODELS)
    measured = await measure_throughput(servers.stack_port, models, options.concurrency, options.duration,
                                        THROUGHPUT_WARMUP_S)
    results[f"models_c{options.concurrency}"] = {"stack": asdict(measured)}
    return results


async def run_check_client(options: Options, servers: Servers) -> dict[str, Any]:
    results: dict[str, Any] = {}
    port = servers.upstream_port
    for name, request in [("plain", chat_request(port, False)), ("stream", chat_request(port, True)),
                          ("models", get(port, "/v1/models", EXPECT_MODELS))]:
        measured = await measure_throughput(port, request, options.concurrency, options.duration,
                                            THROUGHPUT_WARMUP_S)
        results[f"{name}_c{options.concurrency}"] = {"upstream": asdict(measured)}
    return results


def progress(message: str) -> None:
    print(f"  ... {message}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# Report


def verdict(ok: bool) -> str:
    return "ok" if ok else "MISSED"


def latency_rows(kind: str, pair: dict[str, Any]) -> list[tuple[str, str, str, str, str]]:
    up, st = pair["upstream"], pair["stack"]
    rows: list[tuple[str, str, str, str, str]] = []
    measures = [("p50", "p50_ms"), ("p99", "p99_ms")]
    if kind == "stream":
        measures.append(("p50 first content", "first_p50_ms"))
    for label, key in measures:
        added = st[key] - up[key]
        target = ""
        if key == "p50_ms":
            target = f"added < {TARGET_ADDED_P50_MS:g} ms  {verdict(added < TARGET_ADDED_P50_MS)}"
        rows.append((f"c=1 {kind:<6} {label}", f"{up[key]:.3f} ms", f"{st[key]:.3f} ms", f"{added:+.3f} ms", target))
    errors = up["errors"] + st["errors"]
    if errors:
        rows.append((f"c=1 {kind:<6} errors", str(up["errors"]), str(st["errors"]), "", ""))
    return rows


def throughput_cell(measured: dict[str, Any] | None) -> str:
    if measured is None:
        return "-"
    return f"{measured['rps']:,.0f}/s ({measured['errors']} err)"


def throughput_row(label: str, pair: dict[str, Any], target: float | None) -> tuple[str, str, str, str, str]:
    stack = pair.get("stack")
    mark = ""
    if target is not None and stack is not None:
        mark = f">= {target:,.0f}/s  {verdict(stack['rps'] >= target and stack['errors'] == 0)}"
    up = pair.get("upstream")
    ratio = f"x{stack['rps'] / up['rps']:.2f}" if up and stack and up["rps"] else ""
    return (label, throughput_cell(up), throughput_cell(stack), ratio, mark)


def report(results: dict[str, Any], options: Options) -> str:
    c = options.concurrency
    rows: list[tuple[str, str, str, str, str]] = [("measure", "upstream", "stack", "added", "target")]
    targets = {"plain": TARGET_PLAIN_RPS, "stream": TARGET_STREAM_RPS}
    for kind in kinds(options):
        if f"{kind}_c1" in results:
            rows += latency_rows(kind, results[f"{kind}_c1"])
        if f"{kind}_c{c}" in results:
            rows.append(throughput_row(f"c={c} {kind} req/s", results[f"{kind}_c{c}"], targets[kind]))
    if f"models_c{c}" in results:
        rows.append(throughput_row(f"c={c} GET /v1/models", results[f"models_c{c}"], None))
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    lines = ["  ".join(cell.ljust(widths[i]) if i == 0 else cell.rjust(widths[i]) if i < 4 else cell
                       for i, cell in enumerate(row)).rstrip() for row in rows]
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines)


def client_note(results: dict[str, Any]) -> str:
    cpu = [side["client_cpu_us"] for pair in results.values() for side in pair.values() if "client_cpu_us" in side]
    if not cpu:
        return ""
    return f"load generator CPU per request: {min(cpu):.0f}-{max(cpu):.0f} us (on core {CLIENT_CORE})"


# ---------------------------------------------------------------------------------------------
# Entry point


def parse_args() -> Options:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=2_000, help="c=1 requests measured (after 200 warm-up)")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per throughput window (after 2 s warm-up)")
    parser.add_argument("--concurrency", type=int, default=32, help="connections in the throughput runs")
    parser.add_argument("--only", choices=["plain", "stream"], help="only plain or only streamed chat")
    parser.add_argument("--json", type=Path, dest="json_path", help="also write the numbers here")
    parser.add_argument("--check-client", action="store_true", help="load generator vs the fake upstream alone")
    args = parser.parse_args()
    return Options(args.requests, args.duration, args.concurrency, args.only, args.json_path, args.check_client)


def header(options: Options) -> str:
    if options.check_client:
        return (f"load generator check: fake upstream on core 0, this client on core {CLIENT_CORE}, "
                f"c={options.concurrency}, {options.duration:g} s window")
    return (f"chat completions, model {MODEL}, message {MESSAGE!r} (64-token answer); stack on core {STACK_CORE}, "
            f"fake upstream and load generator on core {UPSTREAM_CORE}; c=1: {options.requests} requests "
            f"after {LATENCY_WARMUP} warm-up; c={options.concurrency}: {options.duration:g} s after "
            f"{THROUGHPUT_WARMUP_S:g} s warm-up")


def main() -> None:
    options = parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so that the servers are stopped
    upstream_core = 0 if options.check_client else UPSTREAM_CORE
    with running_servers(not options.check_client, upstream_core) as servers:
        os.sched_setaffinity(0, {CLIENT_CORE})
        runner = run_check_client if options.check_client else run_bench
        results = uvloop.run(runner(options, servers))
    print(header(options))
    print(report(results, options) if not options.check_client else check_report(results))
    print(client_note(results))
    if options.json_path is not None:
        document = {"options": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(options).items()},
                    "cores": {"stack": STACK_CORE, "upstream": upstream_core, "client": CLIENT_CORE},
                    "targets": {"plain_rps": TARGET_PLAIN_RPS, "stream_rps": TARGET_STREAM_RPS,
                                "added_p50_ms": TARGET_ADDED_P50_MS},
                    "results": results}
        options.json_path.write_text(json.dumps(document, indent=2) + "\n")


def check_report(results: dict[str, Any]) -> str:
    return "\n".join(f"{name:<12} {pair['upstream']['rps']:>9,.0f} req/s  ({pair['upstream']['errors']} err, "
                     f"client {pair['upstream']['client_cpu_us']:.0f} us CPU/request)"
                     for name, pair in results.items())


if __name__ == "__main__":
    main()
