"""Run a plan under uvicorn: start the stack, serve until SIGTERM/SIGINT, then shut down in order."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
import socket
from collections.abc import Callable, Coroutine, Iterable, Iterator
from typing import TYPE_CHECKING, Any

import uvicorn

from builder.resolve import StackPlan
from runtime.app.stack_app import StackApp, create_app
from runtime.server.http_protocol import HttpLimits, guarded_protocol, sweep
from runtime.server.workers import worker_metrics
from runtime.stack import open_stack

if TYPE_CHECKING:
    from runtime.observability.worker_metrics import WorkerMetrics

__all__ = ["run_server", "serve"]

log = logging.getLogger("stack")


async def serve(plan: StackPlan, host: str | None = None, port: int | None = None, reuse_port: bool = False) -> None:
    """Serve `plan` until the process is asked to stop; in-flight requests are let finish. With
    `reuse_port`, the port is shared with the other workers of `stack run --workers N`."""
    server_config = plan.config.server
    async with open_stack(plan) as stack:
        app = create_app(stack)
        _freeze_startup_objects()
        limits = HttpLimits(server_config.header_timeout_s, server_config.body_timeout_s, server_config.max_header_bytes,
                            server_config.keep_alive_timeout_s)
        config = uvicorn.Config(
            app,
            host=host or server_config.host,
            port=server_config.port if port is None else port,
            ssl_certfile=str(server_config.tls_certfile) if server_config.tls_certfile else None,
            ssl_keyfile=str(server_config.tls_keyfile) if server_config.tls_keyfile else None,
            lifespan="off",
            access_log=False,
            # X-Forwarded-* rewriting is a middleware layer on every request; the stack does not
            # use the client address, so it is off.
            proxy_headers=False,
            log_config=None,
            timeout_graceful_shutdown=server_config.shutdown_grace_s,
            ws=_websocket_protocol,  # type: ignore[arg-type]  # uvicorn calls it like the protocol class
            http=guarded_protocol(limits),  # type: ignore[arg-type]  # likewise
        )
        server = _Server(config)
        _stop_on_signals(server, lambda: _begin_shutdown(app, stack.impls.values(), server_config.shutdown_grace_s))
        log.info("serving %s on %s://%s:%d", plan.config.name, "https" if server_config.tls_certfile else "http", config.host, config.port)
        shared = await _share_metrics(app) if reuse_port else None
        sweeper = asyncio.create_task(sweep(server.server_state, limits))
        try:
            await server.serve(sockets=[_shared_socket(config.host, config.port)] if reuse_port else None)
        finally:
            sweeper.cancel()
            if shared is not None:
                await shared.close()
    log.info("stopped")


async def _share_metrics(app: StackApp) -> WorkerMetrics | None:
    """In a worker of `stack run --workers N` with metrics on: its metrics shared with the other
    workers', so that a scrape of any of them sees the whole server."""
    place = worker_metrics()
    if app.state.metrics is None or place is None:
        return None
    from runtime.observability.worker_metrics import WorkerMetrics

    shared = WorkerMetrics(app.state.metrics, *place)
    await shared.start()
    return shared


def _shared_socket(host: str, port: int) -> socket.socket:
    """A listening socket on `port` that other processes bind too (the kernel spreads connections)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def _websocket_protocol(*args: Any, **kwargs: Any) -> Any:
    """uvicorn's WebSocket protocol (websockets' sans-I/O implementation), imported on the first
    WebSocket handshake rather than at start-up, where it cost about 110 ms here; its shutdown
    leaves an open connection to the app, which drains it (runtime/apis/responses/websocket.py)."""
    from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

    class DrainedWebSocket(WebSocketsSansIOProtocol):
        def shutdown(self) -> None:
            # uvicorn closes every WebSocket (1012) the moment shutdown begins, cutting a response
            # under way with no last event. An open connection is the app's to close instead: after
            # the response it is answering (ended with response.failed if the grace period runs
            # out), or at once when idle. uvicorn still cancels whatever outlives the grace period.
            if self.handshake_complete and not self.close_sent:
                return
            super().shutdown()

    return DrainedWebSocket(*args, **kwargs)


def _freeze_startup_objects() -> None:
    """Move everything alive after start-up (modules, the app, the providers: it all lives as long
    as the process) out of the garbage collector's sight. A full collection then walks only what
    requests made; before, it walked the start-up heap too, about 30 ms that one request in a few
    dozen paid (measured with a 1,000-item conversation). The library client leaves this to the
    application whose process it runs in, and the collector's thresholds with them.

    `stack run` starts with the collector off (runtime.cli), and this turns it on. Nothing is
    collected first: the garbage cycles start-up leaves (0.3 MiB of generated types and functions)
    are frozen with the rest for good, where a full collection cost 30 to 50 ms of every start."""
    gc.freeze()
    gc.enable()
    # A proxied chat request allocates more than 700 containers, the default gen-0 threshold, so
    # the young generation was collected at least once a request: 12.8 µs of each (py-spy). Ten
    # times fewer, larger collections took plain chat at c=32 from 3,341-3,364 to 3,548-3,554/s.
    gc.set_threshold(7_000, 10, 10)


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # uvicorn re-raises a captured SIGTERM once it has stopped serving, which would kill the
        # process before the providers' shutdown hooks run; serve() handles the signals instead.
        yield


def _stop_on_signals(server: uvicorn.Server, begin: Callable[[], None]) -> None:
    loop = asyncio.get_running_loop()

    def stop(sig: int) -> None:
        begin()
        server.handle_exit(sig, None)

    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop, sig)
        except (NotImplementedError, RuntimeError):  # not the main thread, or no signals here
            return


def _begin_shutdown(app: Any, implementations: Iterable[Any], grace_s: float) -> None:
    """New requests are refused from now on (uvicorn stops accepting connections; a request that
    still arrives on an open one gets a 503), and providers learn that what they end from now on
    is ended by the shutdown (`begin_shutdown`, see contract/spec.py). Shortly before uvicorn
    cancels what is left, the streams still under way are ended, each with a last event."""
    if app.state.draining.started:
        return  # a second signal: the first one's shutdown goes on
    app.state.draining.begin()
    implementations = list(implementations)
    _call_hooks(implementations, "begin_shutdown")

    def end_streams() -> None:
        app.state.draining.end_streams()
        _call_hooks(implementations, "end_streams")

    asyncio.get_running_loop().call_later(max(0.0, grace_s - min(2.0, grace_s / 2)), end_streams)


def _call_hooks(implementations: Iterable[Any], name: str) -> None:
    for implementation in implementations:
        hook = getattr(implementation, name, None)
        if callable(hook):
            try:
                hook()
            except Exception:
                log.exception("%s of %s failed", name, type(implementation).__name__)


def run_server(plan: StackPlan, host: str | None = None, port: int | None = None, reuse_port: bool = False) -> None:
    settings = plan.config.server.logging
    if settings is None:
        _run(serve(plan, host, port, reuse_port))
        return
    from runtime.observability import logs

    writer = logs.configure(settings)
    try:
        _run(serve(plan, host, port, reuse_port))
    finally:
        writer.close()  # writes what is still queued


def _run(main: Coroutine[Any, Any, None]) -> None:
    # uvloop, where installed, roughly halves the event loop's share of each request.
    try:
        import uvloop
    except ImportError:
        asyncio.run(main)
    else:
        uvloop.run(main)
