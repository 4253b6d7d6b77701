"""A TCP proxy on 127.0.0.1 that a test can cut and restore: the database "goes away" (every
connection through it dropped, new ones refused) and comes back on the same port, without
stopping the server the rest of the suite shares."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

from runtime.testing.targets import free_port

__all__ = ["TcpProxy", "postgres_behind_proxy", "tcp_proxy"]


class TcpProxy:
    """Forwards 127.0.0.1:`port` to `target_host`:`target_port`, on a thread's event loop of its own."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = free_port()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="tcp-proxy", daemon=True)
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._frozen = asyncio.Event()  # set: bytes are held, not passed (a network that drops packets)
        self._silenced: set[asyncio.StreamWriter] = set()  # writers of connections that carry nothing more, ever

    def start(self) -> None:
        self._thread.start()
        self.restore()

    def cut(self) -> None:
        """Refuse new connections and drop every open one (as a database server that stops)."""
        self._call(self._cut())

    def restore(self) -> None:
        """Listen again on the same port."""
        self._call(self._listen())

    def freeze(self) -> None:
        """Keep every connection open but pass nothing either way: a network partition, where the
        database neither answers nor refuses."""
        self._loop.call_soon_threadsafe(self._frozen.set)

    def thaw(self) -> None:
        self._loop.call_soon_threadsafe(self._frozen.clear)

    def blackhole(self) -> None:
        """The connections open now carry nothing more, ever, and are never closed (a partition
        that outlasts them, or a failover that moved the server away); new ones pass."""
        self._loop.call_soon_threadsafe(self._silenced.update, set(self._writers))

    def close(self) -> None:
        self._call(self._close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()

    def _call(self, coroutine: Any) -> None:
        future: Future[None] = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        future.result(10)

    async def _listen(self) -> None:
        if self._server is None:
            self._server = await asyncio.start_server(self._forward, "127.0.0.1", self.port, reuse_address=True)

    async def _cut(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        for writer in list(self._writers):
            writer.transport.abort()  # a reset, not a polite close: as a server process that died
        self._writers.clear()

    async def _close(self) -> None:
        await self._cut()
        tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _forward(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        try:
            target_reader, target_writer = await asyncio.open_connection(*self.target)
        except OSError:
            client_writer.transport.abort()
            return
        self._writers.update((client_writer, target_writer))

        async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError, asyncio.IncompleteReadError):
                while data := await reader.read(65536):
                    while self._frozen.is_set() or writer in self._silenced:
                        await asyncio.sleep(0.05)
                    writer.write(data)
                    await writer.drain()
            writer.transport.abort()

        await asyncio.gather(pipe(client_reader, target_writer), pipe(target_reader, client_writer))
        self._writers.difference_update((client_writer, target_writer))


@contextlib.contextmanager
def tcp_proxy(target_host: str, target_port: int) -> Iterator[TcpProxy]:
    proxy = TcpProxy(target_host, target_port)
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.close()


@contextlib.contextmanager
def postgres_behind_proxy(dsn: str) -> Iterator[tuple[str, TcpProxy]]:
    """`dsn`, a database of the server at 127.0.0.1:5432, reached through a proxy: the DSN that
    goes through it, and the proxy."""
    with tcp_proxy("127.0.0.1", 5432) as proxy:
        yield dsn.replace("127.0.0.1:5432", f"127.0.0.1:{proxy.port}"), proxy
