"""What the HTTP benchmarks share: the load generator, measurements, processes, tables.

The load generator is a minimal HTTP/1.1 keep-alive client on an asyncio Protocol (run it on
uvloop). `running_servers` starts the fake upstream (tests/fake_upstream) and, given a run.yaml,
`stack run` in front of it, each pinned to a core with taskset, and stops both on exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

ROOT = Path(__file__).resolve().parent.parent
STACK = str(Path(sys.executable).with_name("stack"))
HOST = "127.0.0.1"
STACK_CORE, UPSTREAM_CORE, CLIENT_CORE = 0, 1, 1

REQUEST_TIMEOUT_S = 10.0
LATENCY_LIMIT_S = 60.0  # per c=1 measurement
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
THROUGHPUT_WARMUP_S = 2.0
FIRST_CONTENT = re.compile(rb'"content":\s*"[^"]')  # a chat delta with non-empty content
DONE = b"data: [DONE]"


def compile_project() -> None:
    """Compile the project's modules to bytecode, as an installed program has them: pip compiles a
    wheel's modules when it installs them. This checkout is installed in editable mode, and this
    machine sets PYTHONDONTWRITEBYTECODE=1, so Python would compile every module from source at
    each start (about 100 ms of it). What is compiled lands in __pycache__ (ignored by git)."""
    packages = [str(ROOT / name) for name in ("contract", "builder", "runtime", "providers", "distributions")]
    subprocess.run([sys.executable, "-m", "compileall", "-q", *packages], check=True, stdout=subprocess.DEVNULL)


# ---------------------------------------------------------------------------------------------
# The load generator: a minimal HTTP/1.1 keep-alive client on an asyncio Protocol


@dataclass(frozen=True, slots=True)
class Request:
    """One prebuilt request: its bytes, whether the answer streams, what a good body contains.

    For streams, `first` marks the first event that counts as content (its arrival is the time to
    first content) and `done` the event that ends a complete stream. `keep` keeps the body (for
    the answers the benchmark reads, e.g. to learn an id); others are only searched.
    """

    raw: bytes
    stream: bool
    expect: bytes
    first: re.Pattern[bytes] = FIRST_CONTENT
    done: bytes = DONE
    keep: bool = False


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    ok: bool
    started: float
    first: float | None  # when the first SSE event carrying content arrived (streams)
    ended: float
    body: bytes = b""  # only for requests with `keep` (chunked bodies are de-chunked)

    @property
    def total_s(self) -> float:
        return self.ended - self.started

    def json(self) -> Any:
        return json.loads(self.body)


def post(port: int, path: str, body: dict[str, Any], expect: bytes, *, first: re.Pattern[bytes] = FIRST_CONTENT,
         done: bytes = DONE, keep: bool = False, headers: dict[str, str] | None = None) -> Request:
    payload = json.dumps(body, separators=(",", ":")).encode()
    head = (
        f"POST {path} HTTP/1.1\r\nhost: {HOST}:{port}\r\ncontent-type: application/json\r\n"
        f"{_header_lines(headers)}content-length: {len(payload)}\r\n\r\n"
    )
    return Request(head.encode() + payload, bool(body.get("stream")), expect, first, done, keep)


def get(port: int, path: str, expect: bytes, *, keep: bool = False, headers: dict[str, str] | None = None) -> Request:
    head = f"GET {path} HTTP/1.1\r\nhost: {HOST}:{port}\r\n{_header_lines(headers)}\r\n"
    return Request(head.encode(), False, expect, keep=keep)


def _header_lines(headers: dict[str, str] | None) -> str:
    return "".join(f"{name}: {value}\r\n" for name, value in (headers or {}).items())


_HEAD, _LENGTH, _CHUNKS, _TRAILER = range(4)


def chunk_size(line: bytearray) -> int:
    """The size on a chunk's size line (hex, maybe followed by `;extensions`)."""
    return int(line.split(b";", 1)[0] if b";" in line else line, 16)


class HttpConnection(asyncio.Protocol):
    """One keep-alive connection, one request at a time; `exchange` answers with a Reply.

    Unless the request says `keep`, the body is not kept: each piece of it (a content-length body,
    or one chunk) is searched in place for what the request expects, and for streams for the first
    content event and the end event. An SSE event split across two chunks would be missed;
    uvicorn sends one event per chunk.
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
        self.body = bytearray()
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
        if request.keep:
            self.body = bytearray()
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
            if self.request.keep:
                self.body += buffer[pos:end]
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
        buffer, start, keep = self.buffer, self.pos, self.request.keep
        pos, size, available = start, -1, len(buffer)
        while (end := buffer.find(b"\r\n", pos)) >= 0:
            size = chunk_size(buffer[pos:end])
            if size == 0 or available < end + size + 4:
                break
            if keep:
                self.body += buffer[end + 2 : end + 2 + size]
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
            if self.first is None and request.first.search(buffer, start, end):
                self.first = time.perf_counter()
            if buffer.find(request.done, start, end) >= 0:
                self.seen_done = True

    def _finish(self) -> None:
        ended = time.perf_counter()
        ok = self.status == 200 and self.seen_expect
        if self.request.stream:
            ok = ok and self.first is not None and self.seen_done
        self.state = _HEAD
        body = bytes(self.body) if self.request.keep else b""
        self._settle(lambda waiter: waiter.set_result(Reply(self.status, ok, self.started, self.first, ended, body)))
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


async def fetch(port: int, request: Request) -> Reply:
    """One request on a new connection."""
    conn = await connect(port)
    try:
        return await conn.exchange(request)
    finally:
        conn.close()


async def fetch_all(port: int, requests: Sequence[Request], concurrency: int) -> list[Reply]:
    """Every request, `concurrency` at a time on keep-alive connections; replies in request order."""
    replies: list[Reply | None] = [None] * len(requests)
    indexes = iter(range(len(requests)))

    async def work() -> None:
        conn = await connect(port)
        try:
            for index in indexes:
                if conn.closing:
                    conn = await connect(port)
                replies[index] = await conn.exchange(requests[index])
        finally:
            conn.close()

    await asyncio.gather(*(work() for _ in range(min(concurrency, len(requests)))))
    return [reply for reply in replies if reply is not None]


Requests = Request | Sequence[Request]


def cycle(requests: Requests) -> Callable[[], Request]:
    """The next request to send: always the same one, or each of a list in turn."""
    if isinstance(requests, Request):
        return lambda: requests
    return itertools.cycle(requests).__next__


# ---------------------------------------------------------------------------------------------
# Measurements


def percentile(values: Sequence[float], q: float) -> float:
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
class Samples:
    """Concurrency 1: each good answer's time in milliseconds, in order (streams: and to first content)."""

    totals: list[float]
    firsts: list[float]
    errors: int

    def latency(self, stream: bool) -> Latency:
        first_p50 = percentile(self.firsts, 0.5) if stream else None
        return Latency(len(self.totals), self.errors, percentile(self.totals, 0.5), percentile(self.totals, 0.99),
                       first_p50)


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


async def sample_latency(port: int, requests: Requests, count: int, warmup: int) -> Samples:
    """`warmup` then `count` requests one after another on one connection (at most LATENCY_LIMIT_S)."""
    next_request = cycle(requests)
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
            reply: Reply | None = await conn.exchange(next_request())
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
    return Samples(totals, firsts, errors)


async def measure_latency(port: int, requests: Requests, count: int, warmup: int) -> Latency:
    """`warmup` then `count` requests one after another on one connection (at most LATENCY_LIMIT_S)."""
    stream = (requests if isinstance(requests, Request) else requests[0]).stream
    return (await sample_latency(port, requests, count, warmup)).latency(stream)


@contextlib.contextmanager
def prompt_client(enabled: bool = True) -> Iterator[bool]:
    """This process, the client, at real-time priority (SCHED_FIFO) while the block runs; whether it is.

    The client shares its core with the fake upstream, which writes a stream's 66 events in one
    turn of its loop. A client woken by a server's first event in the middle of that burst waited
    on the core's run queue until the burst ended (the scheduler does not preempt a task that
    has just started its slice), so a stream's first content was timed at the end of the
    upstream's burst, not when it arrived: 0.4 ms late for a third of the requests, by where in
    the burst the server's write fell (`perf sched timehist`: the client's scheduling delay;
    bench/README). At real-time priority the client runs as soon as it is woken, and times what
    it is measuring. Both servers are measured alike either way; it needs root (or
    CAP_SYS_NICE), and without it the block runs at normal priority."""
    if not enabled:
        yield False
        return
    try:
        before = os.sched_getscheduler(0), os.sched_getparam(0)
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
    except (AttributeError, PermissionError, OSError):
        yield False
        return
    try:
        yield True
    finally:
        os.sched_setscheduler(0, before[0], before[1])


async def sample_interleaved(requests: dict[str, tuple[int, Request]], count: int, warmup: int,
                             rounds: int) -> dict[str, Samples]:
    """`sample_latency` for each (port, request), `count` each in all, taken in `rounds` rounds that
    take turns, so that a slow spell of a shared machine falls on all of them alike."""
    collected = {name: Samples([], [], 0) for name in requests}
    for round_index in range(rounds):
        share = count // rounds + (1 if round_index < count % rounds else 0)
        for name, (port, request) in requests.items():
            samples = await sample_latency(port, request, share, max(1, warmup // rounds))
            collected[name].totals += samples.totals
            collected[name].firsts += samples.firsts
            collected[name].errors += samples.errors
    return collected


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


async def _worker(port: int, next_request: Callable[[], Request], window: _Window) -> None:
    conn: HttpConnection | None = None
    try:
        while time.perf_counter() < window.stop:
            reply: Reply | None = None
            try:
                if conn is None or conn.closing:
                    conn = await connect(port)
                reply = await conn.exchange(next_request())
            except OSError:  # refused, reset, or timed out
                await asyncio.sleep(0.01)  # refused or reset: count it, do not spin
            window.record(reply, time.perf_counter())
    finally:
        if conn is not None:
            conn.close()


async def measure_throughput(
    port: int, requests: Requests, concurrency: int, duration: float, warmup: float, pids: dict[str, int]
) -> Throughput:
    """`concurrency` connections in a loop; counts what completes within the window after `warmup`."""
    next_request = cycle(requests)
    begin = time.perf_counter()
    window = _Window(begin + warmup, begin + warmup + duration)
    sampler = asyncio.create_task(sample_cpu({"client": os.getpid(), **pids}, warmup, duration))
    tasks = [asyncio.create_task(_worker(port, next_request, window)) for _ in range(concurrency)]
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


def cpu_seconds(pid: int, descendants: bool = True) -> float:
    """User plus system CPU time of process `pid` (all its threads) and, with `descendants`, of its
    live descendants (the stack's trace-exporting process: its work counts as the stack's)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:  # ended meanwhile
        return 0.0
    own = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
    if not descendants:
        return own
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        children = []
    return own + sum(cpu_seconds(int(child)) for child in children)


async def sample_cpu(pids: dict[str, int], warmup: float, duration: float) -> dict[str, float]:
    """Each process's CPU use over the window, in percent of one core."""
    await asyncio.sleep(warmup)
    # The client's own: the servers it started are its descendants too.
    before, started = {name: cpu_seconds(pid, name != "client") for name, pid in pids.items()}, time.perf_counter()
    await asyncio.sleep(duration)
    after, elapsed = {name: cpu_seconds(pid, name != "client") for name, pid in pids.items()}, time.perf_counter() - started
    return {name: round(100 * (after[name] - before[name]) / elapsed, 1) for name in pids}


def cpu_per_request_us(measured: Throughput, name: str = "stack") -> float:
    """CPU time of process `name` per completed request in a throughput window, in microseconds."""
    return measured.cpu_percent[name] / 100 * measured.duration_s / max(1, measured.completed) * 1e6


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


def start_unpinned_upstream(logs: Path) -> tuple[subprocess.Popen[bytes], str]:
    """The fake upstream free to use every core (the benches of several processes share them),
    its log in `logs`; the process and its URL once it listens."""
    env = dict(os.environ, PYTHONPATH=str(ROOT / "tests"))
    with (logs / "upstream.log").open("ab") as sink:
        upstream = subprocess.Popen([sys.executable, "-m", "fake_upstream", "--port", "0"], cwd=ROOT, env=env,
                                    stdout=subprocess.PIPE, stderr=sink, start_new_session=True)
    try:
        return upstream, read_listening_url(upstream)
    except BaseException:
        stop(upstream)
        raise


def stack_env(upstream_url: str, state_dir: Path) -> dict[str, str]:
    """The environment `bench/*-run.yaml` read: the upstream, the state directory, live recording."""
    return dict(os.environ, BENCH_UPSTREAM_URL=f"{upstream_url}/v1", BENCH_STATE_DIR=str(state_dir),
                STACK_RECORDING_MODE="live", STACK_LOG_LEVEL="WARNING")


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
def running_servers(run_yaml: Path | None, upstream_core: int = UPSTREAM_CORE, name: str = "chat") -> Iterator[Servers]:
    """The fake upstream and (given a `run_yaml`) the stack in front of it; stopped on exit.

    The stack's state (SQLite) lives in a temporary directory, removed on exit."""
    processes: list[subprocess.Popen[bytes]] = []
    with tempfile.TemporaryDirectory(prefix=f"stack-bench-{name}-") as temp:
        logs = Path(temp)
        try:
            env = dict(os.environ, PYTHONPATH=str(ROOT / "tests"))
            upstream = spawn([sys.executable, "-m", "fake_upstream", "--port", "0"], upstream_core, env,
                             logs / "upstream.log", stdout=subprocess.PIPE)
            processes.append(upstream)
            upstream_url = read_listening_url(upstream)
            servers = Servers(upstream, int(upstream_url.rsplit(":", 1)[1]))
            if run_yaml is not None:
                servers.stack_port = free_port()
                stack_env = dict(
                    os.environ, BENCH_UPSTREAM_URL=f"{upstream_url}/v1", BENCH_STATE_DIR=str(logs / "state"),
                    STACK_RECORDING_MODE="live", STACK_LOG_LEVEL="WARNING",
                )
                servers.stack = spawn([STACK, "run", str(run_yaml), "--port", str(servers.stack_port)],
                                      STACK_CORE, stack_env, logs / "stack.log")
                processes.append(servers.stack)
            yield servers
        except Exception:
            for log_name in ("upstream.log", "stack.log"):
                with contextlib.suppress(OSError):
                    sys.stderr.write(f"--- {log_name} (tail)\n{(logs / log_name).read_text()[-2000:]}\n")
            raise
        finally:
            for process in reversed(processes):
                stop(process)


def py_spy_binary() -> str:
    """py-spy: $BENCH_PY_SPY, else the one on PATH, else /tmp/pyspy-venv/bin/py-spy."""
    return os.environ.get("BENCH_PY_SPY") or shutil.which("py-spy") or "/tmp/pyspy-venv/bin/py-spy"


@contextlib.contextmanager
def profiling(directory: Path | None, name: str, pid: int | None) -> Iterator[None]:
    """With a `directory`, record process `pid` with py-spy (200 Hz, non-blocking, collapsed stacks)
    into `directory/name.txt` while the block runs; without one, nothing."""
    if directory is None or pid is None:
        yield
        return
    directory.mkdir(parents=True, exist_ok=True)
    argv = [py_spy_binary(), "record", "--pid", str(pid), "--rate", "200", "--nonblocking", "--format", "raw",
            "--output", str(directory / f"{name}.txt")]
    with (directory / f"{name}.log").open("wb") as log:
        recorder = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    try:
        yield
    finally:
        recorder.send_signal(signal.SIGINT)  # py-spy writes its output on Ctrl-C
        try:
            recorder.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            recorder.kill()
            recorder.wait()


def progress(message: str) -> None:
    print(f"  ... {message}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# Report

Row = tuple[str, ...]


def verdict(ok: bool) -> str:
    return "ok" if ok else "MISSED"


def table(rows: list[Row]) -> str:
    """The first column left-aligned, the others right-aligned but a last `target` column."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    free = len(widths) - 1 if rows[0][-1] == "target" else len(widths)
    lines = ["  ".join(cell.ljust(widths[i]) if i in (0, free) else cell.rjust(widths[i])
                       for i, cell in enumerate(row)).rstrip() for row in rows]
    lines.insert(1, "-" * max(len(line) for line in lines))
    return "\n".join(lines)


@dataclass
class Run:
    """What `run_with_servers` measured: the results, the load average around it, the time taken."""

    results: Any
    load: tuple[float, float]
    seconds: float


def run_with_servers(
    run_yaml: Path | None, name: str, bench: Callable[[Servers], Any], upstream_core: int = UPSTREAM_CORE
) -> Run:
    """Start the servers, pin this process to the client core, run `bench(servers)` (a coroutine
    function) on uvloop, and stop the servers whatever happens (SIGTERM and Ctrl-C included)."""
    import uvloop

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwinds, so that the servers are stopped
    began, load_before = time.perf_counter(), os.getloadavg()[0]
    try:
        with running_servers(run_yaml, upstream_core, name) as servers:
            os.sched_setaffinity(0, {CLIENT_CORE})
            progress(f"stack pid {servers.stack.pid if servers.stack else '-'}")
            results = uvloop.run(bench(servers))
    except KeyboardInterrupt:
        print("interrupted; the servers are stopped", file=sys.stderr)
        sys.exit(130)
    return Run(results, (load_before, os.getloadavg()[0]), time.perf_counter() - began)


def write_results(path: Path, options: Any, run: Run) -> None:
    """The options, load average and results as JSON."""
    from dataclasses import asdict

    document = {"options": {key: str(value) for key, value in asdict(options).items()},
                "load_average_before_after": run.load, "results": run.results}
    path.write_text(json.dumps(document, indent=2) + "\n")
