"""Clients that send a request too slowly, too large a head, or what is not HTTP, against `stack run`: each is
refused in OpenAI's error shape and its connection closed, while steady clients, however slow, are served.
(Server mode only: the limits are the HTTP server's; the library client has no connections.)"""

from __future__ import annotations

import json
import select
import socket
import time
from collections.abc import Iterator

import httpx2
import pytest

from runtime.testing.targets import running_server

HEADER_TIMEOUT_S = 2.0
BODY_TIMEOUT_S = 2.0
MAX_HEADER_BYTES = 8192
KEEP_ALIVE_TIMEOUT_S = 2.0
WAIT_S = 15.0  # far longer than any limit: a refusal not come by then is not coming


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    directory = tmp_path_factory.mktemp("slow-clients")
    config = directory / "run.yaml"
    config.write_text(
        f"name: slow-clients\nstate_dir: {directory / 'state'}\n"
        "providers:\n  conversations:\n    - {provider_id: builtin, provider_type: builtin}\n"
        f"server:\n  header_timeout_s: {HEADER_TIMEOUT_S}\n  body_timeout_s: {BODY_TIMEOUT_S}\n  max_header_bytes: {MAX_HEADER_BYTES}\n"
        f"  keep_alive_timeout_s: {KEEP_ALIVE_TIMEOUT_S}\n"
    )
    with running_server(str(config)) as base_url:
        host, port = base_url.removeprefix("http://").removesuffix("/v1").split(":")
        yield host, int(port)


def connect(server: tuple[str, int]) -> socket.socket:
    return socket.create_connection(server, timeout=WAIT_S)


def read_all(connection: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection."""
    received = b""
    while chunk := connection.recv(65536):
        received += chunk
    return received


def read_one(connection: socket.socket) -> bytes:
    """One answer with a content-length, the connection left open."""
    received = b""
    while b"\r\n\r\n" not in received:
        received += connection.recv(65536)
    head, _, body = received.partition(b"\r\n\r\n")
    length = int(head.lower().partition(b"content-length: ")[2].split(b"\r\n")[0])
    while len(body) < length:
        body += connection.recv(65536)
    return head + b"\r\n\r\n" + body


def answer(raw: bytes) -> tuple[int, dict[str, str], dict[str, object]]:
    head, _, body = raw.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode().split("\r\n")
    headers = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in header_lines)}
    return int(status_line.split()[1]), headers, json.loads(body)


def request_head(path: str = "/v1/conversations", body_bytes: int | None = None, extra: str = "") -> bytes:
    length = f"content-type: application/json\r\ncontent-length: {body_bytes}\r\n" if body_bytes is not None else ""
    return f"POST {path} HTTP/1.1\r\nhost: test\r\nauthorization: Bearer x\r\n{extra}{length}\r\n".encode()


def test_a_head_that_does_not_arrive_in_time_is_a_408_and_the_connection_is_closed(server: tuple[str, int]) -> None:
    with connect(server) as connection:
        connection.sendall(b"POST /v1/conversations HTTP/1.1\r\nhost: test\r\n")  # and nothing more
        status, headers, error = answer(read_all(connection))
    assert status == 408 and headers["connection"] == "close" and headers["x-request-id"].startswith("req_")
    assert error == {"error": {"message": f"The request's headers did not arrive within {HEADER_TIMEOUT_S:g} s.",
                               "type": "invalid_request_error", "param": None, "code": "request_timeout"}}


def test_a_connection_that_never_sends_a_byte_is_closed_without_an_answer(server: tuple[str, int]) -> None:
    with connect(server) as connection:
        assert read_all(connection) == b""


def test_a_head_trickled_a_byte_at_a_time_is_refused_when_its_time_is_up(server: tuple[str, int]) -> None:
    # Slowloris: each byte comes well within any idle timeout, but the head as a whole never does.
    head = request_head(extra="x-filler: " + "a" * 200 + "\r\n")
    with connect(server) as connection:
        started = time.monotonic()
        for byte in head[:-2]:
            try:
                connection.sendall(bytes([byte]))
            except OSError:
                break  # refused meanwhile
            time.sleep(0.02)
            if time.monotonic() - started > WAIT_S:
                pytest.fail("the head was never refused")
        status, _, error = answer(read_all(connection))
    assert status == 408 and error["error"]["code"] == "request_timeout"  # type: ignore[index]


def test_a_body_that_stops_arriving_is_a_408(server: tuple[str, int]) -> None:
    with connect(server) as connection:
        connection.sendall(request_head(body_bytes=100) + b'{"metadata": {')  # 14 of 100 bytes, then silence
        status, headers, error = answer(read_all(connection))
    assert status == 408 and headers["connection"] == "close"
    assert error["error"] == {"message": f"The request's body did not arrive in time (nothing for {BODY_TIMEOUT_S:g} s).",  # type: ignore[index]
                              "type": "invalid_request_error", "param": None, "code": "request_timeout"}


@pytest.mark.parametrize("pieces", [1, 40], ids=["in-one-write", "in-many-writes"])
def test_a_head_over_the_limit_is_a_431(server: tuple[str, int], pieces: int) -> None:
    head = request_head(body_bytes=2, extra="x-filler: " + "a" * (MAX_HEADER_BYTES + 100) + "\r\n") + b"{}"
    with connect(server) as connection:
        size = -(-len(head) // pieces)
        for start in range(0, len(head), size):
            try:
                connection.sendall(head[start:start + size])
            except OSError:
                break  # refused before the rest was sent
            if pieces > 1:
                time.sleep(0.01)
        status, headers, error = answer(read_all(connection))
    assert status == 431 and headers["connection"] == "close"
    assert error == {"error": {"message": f"The request's headers are larger than {MAX_HEADER_BYTES} bytes.",
                               "type": "invalid_request_error", "param": None, "code": "request_header_fields_too_large"}}


def test_an_endless_header_is_refused_once_it_runs_past_the_limit(server: tuple[str, int]) -> None:
    with connect(server) as connection:
        connection.sendall(b"GET /v1/health HTTP/1.1\r\nhost: test\r\nx-endless: ")
        sent = 0
        while not select.select([connection], [], [], 0)[0]:  # until the server answers
            assert sent < 50 * MAX_HEADER_BYTES, "an endless header was never refused"
            connection.sendall(b"a" * 1024)
            sent += 1024
            time.sleep(0.001)
        status, _, _ = answer(read_all(connection))
    assert status == 431


def test_slow_but_steady_clients_are_served_and_keep_their_connection(server: tuple[str, int]) -> None:
    body = json.dumps({"metadata": {"topic": "slow"}}).encode()
    head = request_head(body_bytes=len(body))
    with connect(server) as connection:
        for start in range(0, len(head), len(head) // 3 + 1):  # the head in three pieces, within its time
            connection.sendall(head[start:start + len(head) // 3 + 1])
            time.sleep(HEADER_TIMEOUT_S / 8)
        for start in range(0, len(body), 6):  # the body over more than BODY_TIMEOUT_S, a little at a time
            connection.sendall(body[start:start + 6])
            time.sleep(BODY_TIMEOUT_S / 4)
        status, _, conversation = answer(read_one(connection))
        assert status == 200 and conversation["metadata"] == {"topic": "slow"}
        # The connection is kept: the next request on it is served too.
        connection.sendall(b"GET /v1/health HTTP/1.1\r\nhost: test\r\n\r\n")
        assert answer(read_one(connection))[0] == 200


def test_an_idle_keep_alive_connection_is_closed_after_its_timeout(server: tuple[str, int]) -> None:
    with connect(server) as connection:
        connection.sendall(b"GET /v1/health HTTP/1.1\r\nhost: test\r\n\r\n")
        assert answer(read_one(connection))[0] == 200
        time.sleep(KEEP_ALIVE_TIMEOUT_S / 2)
        connection.sendall(b"GET /v1/health HTTP/1.1\r\nhost: test\r\n\r\n")  # within its time: served
        assert answer(read_one(connection))[0] == 200
        idle_since = time.monotonic()
        assert read_all(connection) == b""  # then closed without a word
        assert KEEP_ALIVE_TIMEOUT_S <= time.monotonic() - idle_since < WAIT_S


def test_the_server_serves_others_while_refusing(server: tuple[str, int]) -> None:
    stalled = [connect(server) for _ in range(20)]
    try:
        for connection in stalled:
            connection.sendall(b"POST /v1/conversations HTTP/1.1\r\nhost: test\r\n")
        host, port = server
        assert httpx2.get(f"http://{host}:{port}/v1/health", timeout=WAIT_S).status_code == 200
        for connection in stalled:
            assert answer(read_all(connection))[0] == 408
    finally:
        for connection in stalled:
            connection.close()



def test_a_request_the_parser_cannot_read_is_a_400_in_openai_s_shape(server: tuple[str, int]) -> None:
    with connect(server) as connection:  # framed two ways: the way request smuggling begins
        connection.sendall(request_head(body_bytes=2, extra="transfer-encoding: chunked\r\n") + b"{}")
        status, headers, error = answer(read_all(connection))
    assert status == 400 and headers["connection"] == "close"
    assert error["error"]["code"] == "invalid_http_request"  # type: ignore[index]
