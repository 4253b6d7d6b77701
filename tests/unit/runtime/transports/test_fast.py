"""PooledTransport against real servers: the uvicorn fake upstream, and raw asyncio servers for edge cases."""

from __future__ import annotations

import asyncio
import datetime
import gc
import ipaddress
import json
import socket
import ssl
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import httpx2
import openai
import pytest

from fake_upstream.server import FakeUpstream, running_fake_upstream
from runtime.transports.fast import HIGH_WATER, PooledTransport

# Bounds every wait in this file, so a regression fails instead of hanging.
WAIT_S = 2.0
CHAT = {"model": "fake-model", "messages": [{"role": "user", "content": "[tokens:8] hi"}]}
OK = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"


@dataclass
class RawRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


# Answers one request by writing to the writer; returns whether to keep serving the connection.
Respond = Callable[[RawRequest, asyncio.StreamWriter], Awaitable[bool]]


async def answer_ok(request: RawRequest, writer: asyncio.StreamWriter) -> bool:
    writer.write(OK)
    return True


@dataclass
class RawServer:
    """A minimal HTTP/1.1 server that counts connections and lets each test script its answers."""

    respond: Respond
    port: int = 0
    connections: int = 0  # accepted so far
    open: int = 0  # open now
    max_open: int = 0
    received: asyncio.Event = field(default_factory=asyncio.Event)
    closed: asyncio.Event = field(default_factory=asyncio.Event)  # set when a connection ends
    requests: list[RawRequest] = field(default_factory=list)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self.connections += 1
        self.open += 1
        self.max_open = max(self.max_open, self.open)
        try:
            while (request := await read_request(reader)) is not None:
                self.requests.append(request)
                self.received.set()
                if not await self.respond(request, writer):
                    break
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()
            self.open -= 1
            self.closed.set()
            self._tasks.discard(task)

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


async def read_request(reader: asyncio.StreamReader) -> RawRequest | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    line, *lines = head.decode("latin-1").split("\r\n")[:-2]
    method, path, _ = line.split(" ")
    headers = {name.lower(): value for name, value in (item.split(": ", 1) for item in lines)}
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return RawRequest(method, path, headers, body)


@asynccontextmanager
async def raw_server(respond: Respond = answer_ok, tls: ssl.SSLContext | None = None) -> AsyncIterator[RawServer]:
    state = RawServer(respond)
    server = await asyncio.start_server(state.serve, "127.0.0.1", 0, ssl=tls)
    state.port = server.sockets[0].getsockname()[1]
    try:
        yield state
    finally:
        server.close()
        await state.stop()
        await server.wait_closed()


@asynccontextmanager
async def client(**options: object) -> AsyncIterator[httpx2.AsyncClient]:
    async with httpx2.AsyncClient(transport=PooledTransport(**options), timeout=WAIT_S) as http:  # type: ignore[arg-type]
        yield http


def pool_of(http: httpx2.AsyncClient) -> object:
    """The transport's single pool (tests talk to one origin)."""
    transport = http._transport
    assert isinstance(transport, PooledTransport)
    (pool,) = transport._pools.values()
    return pool


def slots_taken(http: httpx2.AsyncClient) -> int:
    return pool_of(http).total  # type: ignore[attr-defined, no-any-return]


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeUpstream]:
    with running_fake_upstream() as running:
        yield running


# -- the happy paths ------------------------------------------------------------------------------


async def test_json_round_trip(upstream: FakeUpstream) -> None:
    async with client() as http:
        response = await http.post(f"{upstream.base_url}/chat/completions", json=CHAT)
    assert response.status_code == 200
    assert response.http_version == "HTTP/1.1"
    assert response.headers["content-type"] == "application/json"
    assert response.json()["choices"][0]["message"]["content"].startswith("tok1")
    assert upstream.bodies()[-1] == CHAT


async def test_sequential_requests_reuse_one_connection() -> None:
    async with raw_server() as server, client() as http:
        for _ in range(5):
            assert (await http.get(f"{server.url}/x?q=1")).content == b"ok"
        assert server.connections == 1
        assert server.requests[0].path == "/x?q=1"
        assert server.requests[0].headers["host"] == f"127.0.0.1:{server.port}"


async def test_request_body_and_headers_are_sent_as_given() -> None:
    async with raw_server() as server, client() as http:
        await http.post(server.url, content=b"payload", headers={"X-Trace": "abc"})

        async def parts() -> AsyncIterator[bytes]:
            yield b"stream"
            yield b"ed"

        await http.post(server.url, content=parts())  # chunked upload, sent as one chunk
    plain, streamed = server.requests
    assert (plain.method, plain.body, plain.headers["x-trace"]) == ("POST", b"payload", "abc")
    assert plain.headers["content-length"] == "7"
    assert streamed.headers["transfer-encoding"] == "chunked"


async def test_sse_chunks_arrive_before_the_server_sends_the_next() -> None:
    gate = asyncio.Event()

    async def sse(request: RawRequest, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
        writer.write(b"d\r\ndata: first\n\n\r\n")
        await writer.drain()
        await gate.wait()
        writer.write(b"e\r\ndata: second\n\n\r\n0\r\n\r\n")
        return True

    async with raw_server(sse) as server, client() as http, http.stream("GET", server.url) as response:
        chunks = response.aiter_raw()
        assert await anext(chunks) == b"data: first\n\n"
        gate.set()
        assert [chunk async for chunk in chunks] == [b"data: second\n\n"]


async def test_chunked_response_is_reassembled_and_the_connection_reused() -> None:
    async def chunked(request: RawRequest, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n")
        await writer.drain()
        await asyncio.sleep(0.01)
        writer.write(b"1\r\n \r\n5;ext=1\r\nworld\r\n0\r\nx-trailer: 1\r\n\r\n")
        return True

    async with raw_server(chunked) as server, client() as http:
        assert (await http.get(server.url)).content == b"hello world"
        assert (await http.get(server.url)).content == b"hello world"
        assert server.connections == 1


async def test_body_delimited_by_close_is_read_to_the_end() -> None:
    async def until_close(request: RawRequest, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nall of ")
        await writer.drain()
        writer.write(b"it")
        return False

    async with raw_server(until_close) as server, client() as http:
        assert (await http.get(server.url)).content == b"all of it"
        assert (await http.get(server.url)).content == b"all of it"
        assert server.connections == 2


async def test_connection_close_header_discards_the_connection() -> None:
    async def closing(request: RawRequest, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\nok")
        return True  # the server would go on: the client must not

    async with raw_server(closing) as server, client() as http:
        for _ in range(3):
            assert (await http.get(server.url)).content == b"ok"
        assert server.connections == 3
        assert slots_taken(http) == 0


async def test_interim_response_and_head_request() -> None:
    async def answers(request: RawRequest, writer: asyncio.StreamWriter) -> bool:
        if request.method == "HEAD":
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n")
        else:
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\n" + OK)
        return True

    async with raw_server(answers) as server, client() as http:
        head = await http.head(server.url)
        assert (head.status_code, head.content, head.headers["content-length"]) == (200, b"", "100")
        assert (await http.get(server.url)).content == b"ok"


async def test_https_with_the_given_ssl_context() -> None:
    server_tls, client_tls = tls_contexts()
    async with raw_server(tls=server_tls) as server, client(ssl_context=client_tls) as http:
        assert (await http.get(f"https://127.0.0.1:{server.port}/")).content == b"ok"
        assert (await http.get(f"https://127.0.0.1:{server.port}/")).content == b"ok"
        assert server.connections == 1


def tls_contexts() -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """A server context with a fresh self-signed certificate for 127.0.0.1, and a client context trusting it."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
        .sign(key, hashes.SHA256())
    )
    cert_pem = cert.public_bytes(serialization.Encoding.PEM)
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(*write_pems(cert_pem, key_pem))
    client_ctx = ssl.create_default_context(cadata=cert_pem.decode())
    return server, client_ctx


def write_pems(cert_pem: bytes, key_pem: bytes) -> tuple[str, str]:
    import tempfile

    paths = []
    for pem in (cert_pem, key_pem):
        with tempfile.NamedTemporaryFile(suffix=".pem", delete=False) as handle:
            handle.write(pem)
            paths.append(handle.name)
    return paths[0], paths[1]


# -- closing early, errors and timeouts -----------------------------------------------------------


async def endless_sse(request: RawRequest, writer: asyncio.StreamWriter) -> bool:
    if request.path != "/sse":
        writer.write(OK)
        return True
    writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
    while True:  # until the client goes away (the write fails)
        writer.write(b"a\r\ndata: x\n\n\r\n")
        await writer.drain()
        await asyncio.sleep(0.005)


async def test_closing_a_stream_early_closes_its_connection_and_the_pool_goes_on() -> None:
    async with raw_server(endless_sse) as server, client() as http:
        async with http.stream("GET", f"{server.url}/sse") as response:
            async for _ in response.aiter_raw():
                break
        await asyncio.wait_for(server.closed.wait(), WAIT_S)  # the server saw the connection go
        assert slots_taken(http) == 0
        assert (await http.get(server.url)).content == b"ok"
        assert server.connections == 2


async def test_connection_refused_is_a_connect_error() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    async with client() as http:
        with pytest.raises(httpx2.ConnectError, match=f"127.0.0.1:{port}") as caught:
            await http.get(f"http://127.0.0.1:{port}/")
        assert isinstance(caught.value.__cause__, OSError)
        assert slots_taken(http) == 0


async def hang(request: RawRequest, writer: asyncio.StreamWriter) -> bool:
    if request.path == "/hang":
        await asyncio.Event().wait()
    writer.write(OK)
    return True


async def test_no_answer_is_a_read_timeout() -> None:
    async with raw_server(hang) as server, client() as http:
        with pytest.raises(httpx2.ReadTimeout):
            await http.get(f"{server.url}/hang", timeout=httpx2.Timeout(WAIT_S, read=0.1))
        assert slots_taken(http) == 0
        assert (await http.get(server.url)).content == b"ok"


async def test_a_read_timeout_applies_to_its_own_request_only() -> None:
    async def slow_on_demand(request: RawRequest, writer: asyncio.StreamWriter) -> bool:
        if request.path == "/slow":
            await asyncio.sleep(0.2)
        writer.write(OK)
        return True

    async with raw_server(slow_on_demand) as server, client() as http:
        await http.get(server.url, timeout=httpx2.Timeout(WAIT_S, read=0.1))  # arms the connection's timer
        slow = await http.get(f"{server.url}/slow", timeout=httpx2.Timeout(WAIT_S, read=None))
        assert slow.content == b"ok"
        with pytest.raises(httpx2.ReadTimeout):
            await http.get(f"{server.url}/slow", timeout=httpx2.Timeout(WAIT_S, read=0.1))
        assert server.connections == 1


async def test_silence_between_body_chunks_is_a_read_timeout() -> None:
    async def stall(request: RawRequest, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc")
        await writer.drain()
        await asyncio.Event().wait()
        return False

    async with raw_server(stall) as server, client() as http:
        async with http.stream("GET", server.url, timeout=httpx2.Timeout(WAIT_S, read=0.1)) as response:
            with pytest.raises(httpx2.ReadTimeout):
                await response.aread()
        assert slots_taken(http) == 0


async def test_server_closing_mid_body_is_a_remote_protocol_error() -> None:
    async def cut(request: RawRequest, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nonly ten b")
        return False

    async with raw_server(cut) as server, client() as http:
        with pytest.raises(httpx2.RemoteProtocolError):
            await http.get(server.url)
        assert slots_taken(http) == 0


async def test_invalid_response_and_header_injection_are_protocol_errors() -> None:
    async def garbage(request: RawRequest, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"NOT HTTP AT ALL\r\n\r\n")
        return True

    async with raw_server(garbage) as server, client() as http:
        with pytest.raises(httpx2.RemoteProtocolError):
            await http.get(server.url)
        with pytest.raises(httpx2.LocalProtocolError):
            await http.get(server.url, headers={"x-evil": "a\r\nx-injected: 1"})
        assert slots_taken(http) == 0


async def test_keep_alive_closed_by_the_server_is_retried_on_a_new_connection() -> None:
    async def once_per_connection(request: RawRequest, writer: asyncio.StreamWriter) -> bool:
        if len(server.requests) % 2 == 0:
            return False  # close without answering: the keep-alive race
        writer.write(OK)
        return True

    async with raw_server(once_per_connection) as server, client() as http:
        assert (await http.get(server.url)).content == b"ok"
        assert (await http.get(server.url)).content == b"ok"
        assert server.connections == 2


async def test_flow_control_bounds_what_is_buffered() -> None:
    size = 16 * HIGH_WATER

    async def big(request: RawRequest, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % size)
        writer.write(b"x" * size)
        return True

    async with raw_server(big) as server, PooledTransport() as transport:
        response = await transport.handle_async_request(httpx2.Request("GET", server.url))
        stream = response.stream
        assert isinstance(stream, httpx2.AsyncByteStream)
        chunks = stream.__aiter__()
        received = len(await anext(chunks))
        await asyncio.sleep(0.2)  # a slow reader: the socket must be paused
        conn = stream._conn  # type: ignore[attr-defined]
        assert conn.paused
        assert conn.buffered <= 2 * HIGH_WATER  # the mark, plus at most one socket read
        received += sum([len(chunk) async for chunk in chunks])
        assert received == size
        assert not conn.paused


# -- the pool under concurrency and cancellation ---------------------------------------------------


async def test_concurrency_above_max_connections_waits_its_turn() -> None:
    async def slow(request: RawRequest, writer: asyncio.StreamWriter) -> bool:
        await asyncio.sleep(0.01)
        writer.write(OK)
        return True

    async with raw_server(slow) as server, client(max_connections=2) as http:
        responses = await asyncio.gather(*(http.get(server.url) for _ in range(12)))
        assert {response.content for response in responses} == {b"ok"}
        assert (server.connections, server.max_open) == (2, 2)
        assert slots_taken(http) == 2


async def test_waiting_for_the_pool_times_out() -> None:
    async with raw_server(hang) as server, client(max_connections=1) as http:
        stuck = asyncio.create_task(http.get(f"{server.url}/hang"))
        await asyncio.wait_for(server.received.wait(), WAIT_S)
        with pytest.raises(httpx2.PoolTimeout):
            await http.get(server.url, timeout=httpx2.Timeout(WAIT_S, pool=0.05))
        stuck.cancel()
        with pytest.raises(asyncio.CancelledError):
            await stuck
        assert (await http.get(server.url)).content == b"ok"


async def test_cancelled_requests_leak_neither_connections_nor_slots() -> None:
    async with raw_server(hang) as server, client(max_connections=1) as http:
        answering = asyncio.create_task(http.get(f"{server.url}/hang"))
        await asyncio.wait_for(server.received.wait(), WAIT_S)
        queued = asyncio.create_task(http.get(server.url))  # waits for the only slot
        await asyncio.sleep(0.01)
        queued.cancel()
        answering.cancel()
        for task in (queued, answering):
            with pytest.raises(asyncio.CancelledError):
                await task
        assert slots_taken(http) == 0
        assert not pool_of(http).conns  # type: ignore[attr-defined]  # the hung connection was closed
        assert (await http.get(server.url)).content == b"ok"
        assert slots_taken(http) == 1  # one idle keep-alive connection


async def test_closing_the_transport_closes_its_connections() -> None:
    async with raw_server() as server:
        async with client() as http:
            await http.get(server.url)
        await asyncio.wait_for(server.closed.wait(), WAIT_S)
        assert server.open == 0


# -- through the openai SDK -----------------------------------------------------------------------


async def test_openai_sdk_non_stream_and_stream(upstream: FakeUpstream) -> None:
    http = httpx2.AsyncClient(transport=PooledTransport())
    async with openai.AsyncOpenAI(base_url=upstream.base_url, api_key="k", http_client=http) as sdk:
        completion = await sdk.chat.completions.create(model="fake-model", messages=[{"role": "user", "content": "[tokens:5] hi"}])
        assert completion.choices[0].message.content == "tok1 tok2 tok3 tok4 tok5"
        stream = await sdk.chat.completions.create(
            model="fake-model", messages=[{"role": "user", "content": "[tokens:5] hi"}], stream=True
        )
        pieces = [chunk.choices[0].delta.content or "" async for chunk in stream if chunk.choices]
        assert "".join(pieces) == "tok1 tok2 tok3 tok4 tok5"
        assert len(pieces) > 2
        assert json.loads(json.dumps(upstream.bodies()[-1]))["stream"] is True


def test_a_transport_outlives_a_finished_event_loop_but_not_aclose(upstream: FakeUpstream) -> None:
    transport = PooledTransport()

    async def get_models() -> int:
        async with httpx2.AsyncClient(transport=transport) as http:
            return (await http.get(f"{upstream.base_url}/models")).status_code

    assert asyncio.run(get_models()) == 200  # the client's exit closes the transport...
    with pytest.raises(RuntimeError, match="closed"):
        asyncio.run(get_models())  # ...for good

    async def twice(close: bool) -> int:
        response = await transport.handle_async_request(httpx2.Request("GET", f"{upstream.base_url}/models"))
        await response.aread()
        if close:
            await transport.aclose()
        return response.status_code

    transport = PooledTransport()
    assert asyncio.run(twice(close=False)) == 200
    assert asyncio.run(twice(close=True)) == 200  # connections of the first (closed) loop were dropped
    with warnings.catch_warnings():
        # Closing a loop with open connections leaves their sockets to the garbage collector.
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()


async def test_an_address_guard_decides_which_addresses_are_dialled() -> None:
    async with raw_server() as server:
        seen: list[tuple[str, str]] = []

        def refuse_loopback(host: str, address: str) -> bool:
            seen.append((host, address))
            return not ipaddress.ip_address(address).is_loopback

        async with client(address_guard=refuse_loopback) as http:
            with pytest.raises(httpx2.ConnectError, match="may not reach"):
                await http.get(f"http://localhost:{server.port}/")
        assert server.connections == 0 and seen and all(host == "localhost" for host, _ in seen)
        async with client(address_guard=lambda host, address: True) as http:
            assert (await http.get(f"http://localhost:{server.port}/")).text == "ok"


def test_a_header_that_would_smuggle_another_is_refused_when_the_head_is_prepared() -> None:
    with pytest.raises(httpx2.LocalProtocolError):
        PooledTransport().prepare("POST", httpx2.URL("http://up/v1/chat/completions"), [(b"host", b"up"), (b"x-key", b"a\r\nx-admin: 1")])
