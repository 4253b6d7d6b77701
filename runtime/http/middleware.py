"""The one ASGI middleware of the app: request ids, the body size limit and type, and the last-resort 500.

Written against raw ASGI rather than Starlette's BaseHTTPMiddleware, which costs a task and a
queue per request and would sit on every streamed chunk.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from contract import fastjson
from runtime.observability import logs
from runtime.http.direct_routes import replay_body
from runtime.http.body_limits import RouteLimits
from contract.errors import PayloadTooLargeError, error_body
from runtime.http.forms import FormFields, form_document
from runtime.http.origins import from_other_origin
from runtime.observability.metrics import Metrics, route_template
from runtime.observability.tracing import Tracing
from runtime.security.auth import RESPONSE_HEADERS
from contract.ids import random_hex

if TYPE_CHECKING:
    from runtime.storage.outage import StorageUnavailableError

__all__ = ["Draining", "RequestGuard", "StreamWait", "new_request_id"]

log = logging.getLogger("stack")


def new_request_id() -> str:
    return "req_" + random_hex(12)


class StreamWait:
    """A stream registered with `Draining`: the task that waits for its next chunk, while it waits.
    Two attribute writes a chunk: registering the waiting task itself for each chunk (as a set's
    member) cost 0.7 µs a chunk, 45 of the 124 µs a 64-token stream spent in its chunk chain in process."""

    __slots__ = ("task", "waiting")

    def __init__(self) -> None:
        self.task: asyncio.Task[Any] | None = None
        self.waiting = False


class Draining:
    """The server's graceful shutdown as the routes see it. Once `started`, requests that arrive
    are answered 503 (in OpenAI's shape, with `connection: close`) rather than started; at the end
    of the grace period `end_streams` interrupts the streams the routes registered (`stream`),
    for each to send its client a last event."""

    def __init__(self) -> None:
        self.started = False
        self.begun = asyncio.Event()
        """Set with `started`: what waits idle (a WebSocket between responses) ends then."""
        self.ending = False
        self._streams: set[StreamWait] = set()
        self.unanswered: dict[asyncio.Task[Any], Callable[[], bool]] = {}
        """Request tasks, each with whether its response has started (RequestGuard keeps it)."""

    def begin(self) -> None:
        """The shutdown has begun: refuse new requests, let idle WebSockets go."""
        self.started = True
        self.begun.set()

    def stream(self) -> StreamWait:
        """Register a stream for the end of the grace period, for its whole life (`unregister` it at
        its end). Around each wait for its next chunk the stream sets its `StreamWait`: `task` (the
        one waiting) and `waiting`; `end_streams` interrupts the tasks that are waiting then."""
        wait = StreamWait()
        self._streams.add(wait)
        return wait

    def unregister(self, wait: StreamWait) -> None:
        self._streams.discard(wait)

    def waiting_tasks(self) -> set[asyncio.Task[Any]]:
        """The tasks `end_streams` would interrupt now: those of the streams waiting for a chunk."""
        return {wait.task for wait in self._streams if wait.waiting and wait.task is not None}

    def end_streams(self) -> None:
        """Interrupt the registered streams, and the requests not yet answered (they get a 503)."""
        self.ending = True
        for task in self.waiting_tasks():
            task.cancel()
        for task, started in list(self.unanswered.items()):
            if not started():
                task.cancel()


class RequestGuard:
    """Tags every response with `x-request-id`, refuses bodies over `max_body_bytes` and bodies
    that are neither JSON nor a form a route takes (see `_takes`; nor a form from a browser page of
    another origin: runtime.http.origins), refuses new requests while the server shuts down, and
    turns an exception that escaped every handler (a bug of ours) into a 500 naming the request id."""

    def __init__(self, app: ASGIApp, max_body_bytes: int, route_limits: Mapping[tuple[str, str], int] | None = None,
                 form_paths: Mapping[str, FormFields] | None = None, draining: Draining | None = None, metrics: Metrics | None = None,
                 tracing: Tracing | None = None, log_context: bool = False, access_log: bool = False,
                 allowed_origins: frozenset[str] = frozenset(), raw_forms: tuple[str, ...] = ()) -> None:
        self.app = app
        self.raw_forms = raw_forms
        """Path prefixes whose forms are passed on as they are (the console's, `/console/`), from this origin only."""
        self.max_body_bytes = max_body_bytes
        self.route_limits = RouteLimits(route_limits)
        """Limits of their own for some (method, path), such as file uploads."""
        self.form_paths = dict(form_paths or {})
        """POST paths whose body may also be a form, read as the JSON object it stands for."""
        self.allowed_origins = frozenset(origin.encode("latin-1") for origin in allowed_origins)
        """The CORS config's origins, whose pages' forms are read (runtime.http.origins)."""
        self.draining = draining or Draining()
        self.metrics = metrics
        """Set: every request is counted and timed here (a middleware of its own would cost a layer)."""
        self.tracing = tracing
        """Set: every request has a server span, opened and closed here."""
        self.log_context = log_context or access_log
        """Set: lines logged during a request carry its id and trace id (runtime.observability.logs)."""
        self.access_log = access_log

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        metrics = self.metrics
        if scope["type"] != "http":
            await self._not_http(scope, receive, send)
            return
        if self.draining.started:
            await _send_error(send, _SHUTTING_DOWN, close=True)
            return
        request_id = new_request_id()
        (state := scope.setdefault("state", {}))["request_id"] = request_id
        header = (b"x-request-id", request_id.encode())
        started = False
        status, streaming = 500, False

        async def send_with_id(message: Message) -> None:
            nonlocal started, status, streaming
            if message["type"] == "http.response.start":
                started = True
                # With the headers auth asked for (a quota's: runtime.security.auth), if any.
                message["headers"] = [*message.get("headers", ()), header, *state.get(RESPONSE_HEADERS, ())]
                status = int(message["status"])
                if metrics is not None:
                    streaming = metrics.stream_started(message["headers"])
            await send(message)

        entered = metrics.enter() if metrics is not None else None
        traced = tracing.enter(scope, request_id) if (tracing := self.tracing) is not None else None
        logged = logs.enter_request(request_id, scope["headers"]) if self.log_context else None
        began = time.perf_counter() if metrics is not None or logged is not None else 0.0
        task = asyncio.current_task()
        try:
            limit = self.route_limits.limit(scope["method"], scope["path"], self.max_body_bytes) if self.route_limits else self.max_body_bytes
            verdict = self._body_verdict(scope, limit)
            receive = self._limited(receive, limit)
            if verdict is not None:
                if isinstance(verdict, tuple):
                    await _send_error(send_with_id, verdict)
                    return
                receive = await _form_as_json(scope, receive, verdict)
            if task is not None:
                self.draining.unanswered[task] = lambda: started
            await self.app(scope, receive, send_with_id)
        except asyncio.CancelledError:
            if not self.draining.ending or started or task is None:
                raise
            # The shutdown's grace period is over and this request has no answer yet.
            task.uncancel()
            await _send_error(send_with_id, _SHUT_DOWN, close=True)
        except Exception as error:
            if started:
                _log_fault(error, scope, request_id)
                raise
            await _answer_fault(error, scope, request_id, send_with_id)
        finally:
            if task is not None:
                self.draining.unanswered.pop(task, None)
            if began:  # metrics or logs are on
                self._observed(scope, status, streaming, began, entered, logged)
            if traced is not None and tracing is not None:
                tracing.leave(traced, scope, route_template(scope), status)

    def _observed(self, scope: Scope, status: int, streaming: bool, began: float, entered: contextvars.Token[Metrics | None] | None,
                  logged: contextvars.Token[list[Any] | None] | None) -> None:
        """A request answered: counted and timed, and its access log line written."""
        if self.metrics is not None:
            self.metrics.request_done(scope, status, streaming, time.perf_counter() - began)
            self.metrics.leave(entered)
        if logged is not None:
            if self.access_log:
                _log_access(scope, status, time.perf_counter() - began)
            logs.leave_request(logged)

    async def _not_http(self, scope: Scope, receive: Receive, send: Send) -> None:
        """A WebSocket connection (one server span, its responses' model calls inside it) or the
        lifespan: counted, and passed on."""
        metrics = self.metrics
        entered = metrics.enter() if metrics is not None else None
        traced = tracing.enter(scope, None) if (tracing := self.tracing) is not None and scope["type"] == "websocket" else None
        try:
            await self.app(scope, receive, send)
        finally:
            if metrics is not None:
                metrics.leave(entered)
            if traced is not None and tracing is not None:
                tracing.leave(traced, scope, route_template(scope), 101)

    def _body_verdict(self, scope: Scope, limit: int) -> tuple[int, dict[str, Any]] | FormFields | None:
        """What a request's body headers decide before any of it is read: the refusal to answer
        with (too large, a media type no route takes), the fields a form body is read as, or None:
        read on."""
        declared, content_type, chunked = _body_headers(scope)
        if declared is not None and declared > limit:
            return _too_large(limit)
        if not (chunked or declared) or _takes(media := _media_type(content_type)):
            return None
        if media == _MULTIPART:
            return _MULTIPART_REFUSED if from_other_origin(scope["headers"], self.allowed_origins) else None
        if media != _FORM:
            return _unsupported_content_type(content_type)
        if self.raw_forms and scope["path"].startswith(self.raw_forms) and not from_other_origin(scope["headers"], self.allowed_origins):
            return None  # the console's own forms, which it reads (and checks their CSRF token) itself
        fields = self.form_paths.get(scope["path"]) if scope["method"] == "POST" else None
        if fields is None or from_other_origin(scope["headers"], self.allowed_origins):
            return _form_refused(self.form_paths)
        return fields

    def _limited(self, receive: Receive, limit: int) -> Receive:
        received = 0

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise PayloadTooLargeError(_too_large(limit)[1]["error"]["message"], code="request_too_large")
            return message

        return limited_receive


def _log_fault(error: Exception, scope: Scope, request_id: str) -> StorageUnavailableError | None:
    """Log a request's unhandled error: the database down in one line (the client's to retry, not
    a bug), anything else with its traceback. The outage, when it is one."""
    from runtime.storage.outage import unavailable

    down = unavailable(error, f"{scope['method']} {scope['path']}", from_database=False)
    if down is None:
        log.exception("unhandled error in %s %s (request id %s)", scope["method"], scope["path"], request_id)
    return down


async def _answer_fault(error: Exception, scope: Scope, request_id: str, send: Send) -> None:
    """The answer to a request whose handler raised before answering: a 503 when the database
    is down, else a 500 naming the request id (the log has the cause)."""
    down = _log_fault(error, scope, request_id)
    if down is not None:
        await _send_error(send, (down.status, down.body()), extra_headers=down.headers)
        return
    await _send_error(send, (500, error_body(f"The server had an error processing your request (request id {request_id}).", "server_error")))


def _log_access(scope: Scope, status: int, elapsed_s: float) -> None:
    principal = (scope.get("state") or {}).get("principal")  # AuthGuard's context has ended by now
    logs.log_access(scope["method"], scope["path"], status, round(elapsed_s * 1000, 2), principal.id if principal is not None else None)


def _body_headers(scope: Scope) -> tuple[int | None, bytes | None, bool]:
    """The request's declared length (None if absent or unreadable), its content type, and whether
    its body comes in chunks."""
    length, content_type, chunked = None, None, False
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                length = int(value)
            except ValueError:
                length = None
        elif name == b"content-type":
            content_type = value
        elif name == b"transfer-encoding":
            chunked = True
    return length, content_type, chunked


_FORM = b"application/x-www-form-urlencoded"
_MULTIPART = b"multipart/form-data"


def _media_type(content_type: bytes | None) -> bytes | None:
    """The type without its parameters, lowercased: `application/json` of `Application/JSON; charset=utf-8`."""
    return content_type.split(b";", 1)[0].strip().lower() if content_type is not None else None


def _takes(media: bytes | None) -> bool:
    """Whether a body of this media type is read whoever sends it: JSON.

    Nothing else, not even a body with no type that parses as JSON. A web page may make a
    browser send text/plain, a form (URL-encoded or multipart) or an untyped body to any address
    without asking first (no CORS preflight), so reading those would let any site a user visits
    run requests on a server on their machine or network (store files on it, when auth is off).
    FastAPI's `strict_content_type` refuses them for the same reason; this applies it to every
    route, the hand-parsed ones too. A form (a file upload, or a form a route takes) is read
    unless the browser says it comes from a page of another origin (runtime.http.origins)."""
    return media is not None and (media == b"application/json" or (media.startswith(b"application/") and media.endswith(b"+json")))


async def _form_as_json(scope: Scope, receive: Receive, fields: FormFields) -> Receive:
    """A form body read whole and handed on as the JSON object it stands for (runtime.http.forms).
    The request's headers then say JSON, so every layer below reads it as one."""
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return receive  # the client left: what follows finds out
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    document = form_document(b"".join(chunks), fields)
    body = fastjson.dumps(document)
    scope["headers"] = [*((name, value) for name, value in scope["headers"]
                          if name not in (b"content-type", b"content-length", b"transfer-encoding")),
                        (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    return replay_body(body, receive)


def _form_refused(form_paths: Mapping[str, FormFields]) -> tuple[int, dict[str, Any]]:
    where = ", ".join(f"POST {path}" for path in sorted(form_paths)) or "no route of this stack"
    return 415, error_body(
        "Unsupported content type: 'application/x-www-form-urlencoded'. A form body is read only on "
        f"{where}, and not from a browser page of another origin (an Origin header naming another host, or Sec-Fetch-Site "
        "cross-site or same-site, with neither an Authorization header nor an origin server.cors.allow_origins allows): any "
        "web page can make a browser send a form. Send JSON (Content-Type: application/json) otherwise.",
        "invalid_request_error",
        code="unsupported_content_type",
    )


_MULTIPART_REFUSED = (415, error_body(
    "Unsupported content type: 'multipart/form-data' from a browser page of another origin (an Origin header naming another "
    "host, or Sec-Fetch-Site cross-site or same-site). A multipart body (a file upload) is not read from one, since any web page "
    "can make a browser send a multipart form. It is read from programs (which send neither header), from requests with an "
    "Authorization header, and from the origins server.cors.allow_origins allows.",
    "invalid_request_error",
    code="unsupported_content_type",
))


def _unsupported_content_type(content_type: bytes | None) -> tuple[int, dict[str, Any]]:
    named = f"'{content_type.decode('latin-1')[:100]}'" if content_type is not None else "none"
    return 415, error_body(
        f"Unsupported content type: {named}. A request body must be JSON (Content-Type: application/json), "
        "or multipart/form-data for file uploads.",
        "invalid_request_error",
        code="unsupported_content_type",
    )


def _too_large(limit: int) -> tuple[int, dict[str, Any]]:
    return 413, error_body(
        f"Request body is larger than the server's limit of {limit} bytes (server.max_request_bytes, or the route's own).",
        "invalid_request_error",
        code="request_too_large",
    )


_SHUT_DOWN = (503, error_body("The server shut down before this request was answered; send it again.", "server_error",
                              code="server_shutting_down"))
_SHUTTING_DOWN = (503, error_body("The server is shutting down; send the request again (to another instance, or once it is back).",
                                   "server_error", code="server_shutting_down"))


async def _send_error(send: Send, error: tuple[int, dict[str, Any]], close: bool = False, extra_headers: Mapping[str, str] | None = None) -> None:
    status, body = error
    payload = json.dumps(body).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode()),
               *((name.encode("latin-1"), value.encode("latin-1")) for name, value in (extra_headers or {}).items())]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})
