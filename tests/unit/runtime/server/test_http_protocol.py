"""The limits on receiving a request, case by case: the protocol fed by hand, its sweep's clock given,
an app that holds what it is sent. (tests/integration/test_slow_clients.py drives them over sockets.)"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from uvicorn.config import Config
from uvicorn.server import ServerState

from runtime.http.departure import on_departure
from runtime.server.http_protocol import LINGER_S, GuardedHttpProtocol, HttpLimits

LIMITS = HttpLimits(header_timeout_s=10, body_timeout_s=60, max_header_bytes=2048, keep_alive_timeout_s=5)


class Transport(asyncio.Transport):
    """What the protocol writes, and whether it closed or shut its writing side."""

    def __init__(self) -> None:
        super().__init__()
        self.written = b""
        self.writes: list[bytes] = []  # each system call's bytes
        self.closed = self.eof = self.paused = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written += bytes(data)
        self.writes.append(bytes(data))

    def writelines(self, list_of_data: Any) -> None:  # one writev
        self.write(b"".join(list_of_data))

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 40000), "sockname": ("127.0.0.1", 8321)}.get(name, default)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        self.eof = True

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False


class App:
    """Answers each request once `release` is set, reading its body only if `reads`."""

    def __init__(self, reads: bool = True) -> None:
        self.reads = reads
        self.release = asyncio.Event()
        self.bodies: list[bytes] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        body = b""
        while self.reads:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        self.bodies.append(body)
        await self.release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"{}"})


def connection(app: Any) -> tuple[GuardedHttpProtocol, Transport]:
    config = Config(app=app, lifespan="off", access_log=False, log_config=None)
    config.load()
    protocol = GuardedHttpProtocol(config=config, server_state=ServerState(), app_state={}, limits=LIMITS)
    transport = Transport()
    protocol.connection_made(transport)
    return protocol, transport


def answered(transport: Transport) -> tuple[int, dict[str, Any]]:
    head, _, body = transport.written.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def sweep(protocol: GuardedHttpProtocol, *times: float) -> None:
    for now in times:
        protocol.expire(now)


async def test_a_head_is_late_from_when_the_sweep_first_sees_it_whatever_trickles_in() -> None:
    protocol, transport = connection(App())
    protocol.data_received(b"POST /v1/conversations HTTP/1.1\r\n")
    sweep(protocol, 100.0)
    protocol.data_received(b"host: test\r\n")  # a byte now and then does not put the deadline off
    sweep(protocol, 109.0)
    assert not transport.written
    sweep(protocol, 110.5)
    assert answered(transport) == (408, {"error": {"message": "The request's headers did not arrive within 10 s.",
                                                   "type": "invalid_request_error", "param": None, "code": "request_timeout"}})
    assert transport.eof and not transport.closed  # lingering: what the client still sends is dropped
    protocol.data_received(b"x-more: 1\r\n\r\n")
    sweep(protocol, 111.0, 111.0 + LINGER_S + 0.5)
    assert transport.closed


async def test_a_body_that_moves_is_never_late_and_one_that_stops_is() -> None:
    app = App()
    protocol, transport = connection(app)
    protocol.data_received(b"POST /v1/conversations HTTP/1.1\r\nhost: test\r\ncontent-length: 30\r\n\r\n{")
    await settle()
    for second in range(0, 300, 50):  # a byte every 50 s, for longer than any one timeout
        sweep(protocol, float(second), second + 49.0)
        protocol.data_received(b" ")
        await settle()
    assert not transport.written
    sweep(protocol, 400.0, 461.0)
    assert answered(transport)[0] == 408
    await settle()
    assert app.bodies == [b"{      "]  # the app read what came, then saw the client gone
    app.release.set()
    await settle()
    assert answered(transport)[0] == 408  # its answer went nowhere: the 408 is the only one


async def test_time_the_server_stopped_reading_is_not_the_client_s() -> None:
    protocol, transport = connection(App(reads=False))  # an app that has not taken the body yet
    protocol.data_received(b"POST /v1/conversations HTTP/1.1\r\nhost: test\r\ncontent-length: 200000\r\n\r\n" + b"x" * 70_000)
    await settle()
    assert transport.paused  # uvicorn stopped reading: the app holds more than its high-water mark
    sweep(protocol, 0.0, 1000.0)
    assert not transport.written


async def test_a_request_received_whole_waits_for_its_answer_without_a_deadline() -> None:
    app = App()
    protocol, transport = connection(app)
    protocol.data_received(b"POST /v1/conversations HTTP/1.1\r\nhost: test\r\ncontent-length: 2\r\n\r\n{}")
    await settle()
    sweep(protocol, 0.0, 1000.0)  # a long answer (a stream) is not the client's delay
    app.release.set()
    await settle()
    assert transport.written.startswith(b"HTTP/1.1 200 ") and not transport.closed


async def test_a_pipelined_head_waits_while_the_answer_before_it_is_sent() -> None:
    app = App()
    protocol, transport = connection(app)
    protocol.data_received(b"GET /v1/health HTTP/1.1\r\nhost: test\r\n\r\nGET /v1/health HTTP/1.1\r\n")
    await settle()
    sweep(protocol, 0.0, 100.0)
    assert not transport.written  # the first answer is still under way
    app.release.set()
    await settle()
    assert transport.written.startswith(b"HTTP/1.1 200 ")
    sweep(protocol, 105.0, 116.0)
    assert transport.written.count(b"HTTP/1.1 408 ") == 1


async def test_an_oversized_head_is_refused_before_the_app_sees_it_even_with_its_body_in_the_same_read() -> None:
    app = App()
    protocol, transport = connection(app)
    protocol.data_received(b"POST /v1/conversations HTTP/1.1\r\nhost: test\r\nx-big: " + b"a" * 4000
                           + b"\r\ncontent-length: 2\r\n\r\n{}GET /v1/health HTTP/1.1\r\n\r\n")
    await settle()
    assert answered(transport)[0] == 431 and app.bodies == []
    assert transport.eof


async def test_an_idle_keep_alive_connection_is_closed_by_the_sweep_not_a_timer_per_answer() -> None:
    app = App()
    app.release.set()
    protocol, transport = connection(app)
    protocol.data_received(b"GET /v1/health HTTP/1.1\r\nhost: test\r\n\r\n")
    await settle()
    assert transport.written.startswith(b"HTTP/1.1 200 ")
    assert protocol.timeout_keep_alive_task is None  # uvicorn's own timer is not armed after each answer
    sweep(protocol, 100.0, 104.5)
    assert not transport.closed
    sweep(protocol, 105.5)
    assert transport.closed and transport.written.count(b"HTTP/1.1 ") == 1  # closed without a word


async def test_a_connection_in_use_is_not_idle() -> None:
    app = App()
    app.release.set()
    protocol, transport = connection(app)
    for second in range(0, 40, 4):  # a request every 4 s, for longer than the keep-alive timeout
        protocol.data_received(b"GET /v1/health HTTP/1.1\r\nhost: test\r\n\r\n")
        await settle()
        sweep(protocol, float(second), second + 3.9)
    assert not transport.closed and transport.written.count(b"HTTP/1.1 200 ") == 10
    protocol.data_received(b"GET /v1/health HTTP/1.1\r\n")  # a head begun: its own limit, not the idle one
    sweep(protocol, 50.0, 56.0)
    assert not transport.closed
    sweep(protocol, 60.5)
    assert transport.written.count(b"HTTP/1.1 408 ") == 1


async def test_a_connection_that_never_sends_is_closed_silently() -> None:
    protocol, transport = connection(App())
    sweep(protocol, 0.0, 9.0)
    assert not transport.closed
    sweep(protocol, 10.5)
    assert transport.closed and not transport.written


async def test_what_the_parser_cannot_read_is_a_400_in_openai_s_shape() -> None:
    # uvicorn's own answer is plain text ("Invalid HTTP request received.").
    for request in (b"FOO /v1/models HTTP/1.1\r\nhost: test\r\n\r\n",
                    b"POST /v1/conversations HTTP/1.1\r\nhost: test\r\ncontent-length: 2\r\ntransfer-encoding: chunked\r\n\r\n{}"):
        protocol, transport = connection(App())
        protocol.data_received(request)
        assert answered(transport) == (400, {"error": {"message": "The request is not valid HTTP/1.1.", "type": "invalid_request_error",
                                                       "param": None, "code": "invalid_http_request"}})
        assert transport.eof


class Answers:
    """Reads the request's body, then sends `messages`, then fails if `fail`."""

    def __init__(self, *messages: dict[str, Any], fail: bool = False) -> None:
        self.messages = messages
        self.fail = fail

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        while (await receive()).get("more_body"):
            pass
        for message in self.messages:
            await send(message)
        if self.fail:
            raise RuntimeError("the app failed mid-answer")


def served(app: Any, request: bytes) -> Transport:
    protocol, transport = connection(app)
    protocol.data_received(request)
    return transport


START = {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json"), (b"content-length", b"11")]}
GET = b"GET /v1/models HTTP/1.1\r\nhost: test\r\n\r\n"


async def test_an_answer_with_a_content_length_goes_out_in_one_write() -> None:
    transport = served(Answers(START, {"type": "http.response.body", "body": b'{"data":[]}'}), GET)
    await settle()
    assert len(transport.writes) == 1
    head, _, body = transport.writes[0].partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK\r\n") and b"content-length: 11" in head and body == b'{"data":[]}'


async def test_a_body_sent_in_parts_is_whole_and_only_its_first_part_waits_for_the_head() -> None:
    parts = (b'{"a":', b"HTTP/1.1 ", b'1}')  # a part that looks like a head is body all the same
    start = {**START, "headers": [(b"content-length", b"%d" % sum(map(len, parts)))]}
    transport = served(Answers(start, *({"type": "http.response.body", "body": part, "more_body": True} for part in parts),
                               {"type": "http.response.body", "body": b""}), GET)
    await settle()
    assert transport.writes[0].endswith(b"\r\n\r\n" + parts[0]) and transport.writes[1:] == [parts[1], parts[2], b""]


async def test_a_stream_s_head_goes_out_with_its_first_part() -> None:
    start = {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]}
    transport = served(Answers(start, {"type": "http.response.body", "body": b"data: 1\n\n", "more_body": True},
                               {"type": "http.response.body", "body": b""}), GET)
    await settle()
    assert transport.writes[0].endswith(b"transfer-encoding: chunked\r\n\r\n9\r\ndata: 1\n\n\r\n")
    assert transport.writes[1:] == [b"0\r\n\r\n"]


async def test_a_stream_whose_first_part_is_slow_shows_its_head_at_once() -> None:
    first = asyncio.Event()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
        await first.wait()
        await send({"type": "http.response.body", "body": b"data: 1\n\n"})

    transport = served(app, GET)
    await settle()
    assert transport.writes == [transport.written] and transport.written.endswith(b"transfer-encoding: chunked\r\n\r\n")
    first.set()
    await settle()
    assert transport.writes[1:] == [b"9\r\ndata: 1\n\n\r\n0\r\n\r\n"]


async def test_a_head_request_s_answer_is_its_head_alone() -> None:
    transport = served(Answers(START, {"type": "http.response.body", "body": b""}), b"HEAD /v1/models HTTP/1.1\r\nhost: test\r\n\r\n")
    await settle()
    assert transport.written.startswith(b"HTTP/1.1 200 OK\r\n") and transport.written.endswith(b"content-length: 11\r\n\r\n")


async def test_a_100_continue_goes_before_the_answer_and_is_not_held() -> None:
    request = b"POST /v1/files HTTP/1.1\r\nhost: test\r\ncontent-length: 2\r\nexpect: 100-continue\r\n\r\n"
    protocol, transport = connection(Answers(START, {"type": "http.response.body", "body": b'{"data":[]}'}))
    protocol.data_received(request)
    await settle()
    assert transport.writes == [b"HTTP/1.1 100 Continue\r\n\r\n"]  # the app waits for the body
    protocol.data_received(b"{}")
    await settle()
    assert len(transport.writes) == 2 and transport.writes[1].endswith(b'\r\n\r\n{"data":[]}')


async def test_an_answer_the_app_abandons_after_its_start_closes_the_connection() -> None:
    transport = served(Answers(START, fail=True), GET)
    await settle()
    assert transport.closed and not transport.written  # no head promising a body that never comes


async def test_an_app_is_told_its_client_left_without_a_task_waiting_to_find_out() -> None:
    told: list[str] = []
    registered = asyncio.Event()
    tasks_while_watching: list[int] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        before = len(asyncio.all_tasks())
        on_departure(scope, receive, lambda: told.append("kept"))
        forget = on_departure(scope, receive, lambda: told.append("forgotten"))
        forget()
        tasks_while_watching.append(len(asyncio.all_tasks()) - before)
        registered.set()
        await asyncio.sleep(3600)

    protocol, transport = connection(app)
    protocol.data_received(GET)
    await registered.wait()
    assert tasks_while_watching == [0]  # runtime.http.departure's fallback would have added one per watch
    protocol.connection_lost(None)
    assert told == ["kept"]
    for task in protocol.tasks:
        task.cancel()


async def test_a_watch_begun_after_the_client_left_is_told_at_once() -> None:
    told: list[str] = []
    protocol, transport = connection(App())
    protocol.data_received(b"POST /v1/conversations HTTP/1.1\r\nhost: test\r\ncontent-length: 9\r\n\r\n{")
    await settle()
    sweep(protocol, 0.0, 61.0)  # the body is late: refused, and the app's client is gone
    notice = protocol.scope["extensions"]["stack.departure"]["notice"]
    notice(lambda: told.append("gone"))
    await settle()
    assert told == ["gone"]


async def test_an_answered_request_s_cycle_is_freed_without_the_garbage_collector() -> None:
    import gc
    import weakref

    protocol, transport = connection(Answers(START, {"type": "http.response.body", "body": b'{"data":[]}'}))
    protocol.data_received(GET)
    await settle()
    cycle = weakref.ref(protocol.cycle)
    gc.disable()
    try:
        protocol.data_received(GET)  # the next request's cycle takes the connection's place
        await settle()
        assert cycle() is None  # no reference cycle kept it: freed when the connection let it go
    finally:
        gc.enable()
    assert transport.writes[-1].endswith(b'{"data":[]}')
