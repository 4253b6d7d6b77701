"""The metrics of a server of several workers (`stack run --workers N`): whichever worker a scrape
reaches answers the sum of every worker's, so one scrape sees the whole server.

The supervisor makes a directory for the server's life (runtime.server.workers) and each worker
keeps two things there under its number:

- `<n>.json`, its metrics' values (`Metrics.snapshot`), written again every `_WRITE_EVERY_S` when
  they changed, each time it answers for them, and at its shutdown (written aside and renamed, so
  a reader never sees half of one);
- `<n>.sock`, a Unix socket on which it answers its values of the moment to whoever connects.

A worker scraped counts what it has left unfolded, asks the others at once for theirs (each folds,
writes its file and answers: about a millisecond), and sums them with its own. A scrape is exact:
every request any worker had finished when the scrape came is in it. A worker that does not answer
within `_ASK_TIMEOUT_S` (its event loop held up) is counted from its file, a second old at most
while its loop turns. A worker that is gone (its socket refuses, or is no more) is counted from
its file too, its gauges left out (its streams are not open any more); its replacement, the same
number, starts its counters and histograms from that file, so that the server's counters never go
back (every value a scrape showed was in the worker's file first). Counts a worker made in its
last second and showed to no scrape go with it when it is killed outright.

The request path is not touched: the workers' metrics are the single process's, and this module
only reads them (on the event loop, as the single process's scrape does).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
from pathlib import Path

from runtime.observability.metrics import Metrics, Snapshot, merged

__all__ = ["WorkerMetrics"]

log = logging.getLogger("stack")

_WRITE_EVERY_S = 1.0
_ASK_TIMEOUT_S = 0.5
_MAX_SOCKET_PATH = 100  # sun_path is 104 to 108 bytes depending on the system
_ENTRY = re.compile(r"(\d+)\.(?:json|sock)")


class WorkerMetrics:
    """Worker `number`'s end of the server's metrics in `directory` (see the module's docstring)."""

    def __init__(self, metrics: Metrics, directory: Path, number: int) -> None:
        self.metrics, self.directory, self.number = metrics, directory, number
        self._written = b""
        self._server: asyncio.AbstractServer | None = None
        self._writer: asyncio.Task[None] | None = None
        self._failed = False

    async def start(self) -> None:
        """Before the worker serves: take over what a worker of this number counted before it (its
        counters and histograms), answer on the socket, and from now on answer scrapes for all."""
        carried = _read(self._file(self.number))
        if carried is not None:
            self.metrics.add(_without_gauges(carried))
        path = self._socket(self.number)
        if path is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)  # a worker of this number that was killed left it
            try:
                self._server = await asyncio.start_unix_server(self._answer, path=path)
            except OSError as error:
                log.warning("metrics: no socket at %s (%s): the other workers read this one's file, up to %.0f s old",
                            path, error, _WRITE_EVERY_S)
        self._write()
        self._writer = asyncio.create_task(self._write_every())
        self.metrics.gather = self.exposition

    async def close(self) -> None:
        """After the worker has served its last request: its last values written, for the server's totals."""
        self.metrics.gather = None
        if self._writer is not None:
            self._writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._writer
        if self._server is not None:
            self._server.close()
            path = self._socket(self.number)
            if path is not None:
                with contextlib.suppress(OSError):
                    os.unlink(path)
        self._write()

    async def exposition(self) -> bytes:
        """The whole server's metrics in Prometheus' text format: this worker's and every other's."""
        own, _ = self._write()
        others = await asyncio.gather(*(self._ask(number) for number in self._others()))
        return merged([own, *(snapshot for snapshot in others if snapshot is not None)]).exposition()

    def _write(self) -> tuple[Snapshot, bytes]:
        """This worker's values now (and as JSON), written to its file if they changed since the last time."""
        snapshot = self.metrics.snapshot()
        data = json.dumps(snapshot, separators=(",", ":")).encode()
        if data != self._written:
            path = self._file(self.number)
            aside = path.with_suffix(".tmp")
            try:
                aside.write_bytes(data)
                os.replace(aside, path)
            except OSError as error:
                if not self._failed:
                    log.warning("metrics: cannot write %s (%s): the other workers' scrapes miss this one's latest counts",
                                path, error)
                self._failed = True
            else:
                self._written, self._failed = data, False
        return snapshot, data

    async def _write_every(self) -> None:
        while True:
            await asyncio.sleep(_WRITE_EVERY_S)
            self._write()

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Another worker's question: this worker's values now (written to its file first)."""
        try:
            writer.write(self._write()[1])
            await writer.drain()
        except OSError:
            pass  # the asker gave up (its timeout): it reads the file instead
        finally:
            writer.close()

    async def _ask(self, number: int) -> Snapshot | None:
        """Worker `number`'s values now; from its file if it does not answer in time, without its
        gauges if it is gone."""
        path = self._socket(number)
        if path is not None:
            try:
                async with asyncio.timeout(_ASK_TIMEOUT_S):
                    reader, writer = await asyncio.open_unix_connection(path)
                    try:
                        data = await reader.read()
                    finally:
                        writer.close()
                answered = json.loads(data)
                if isinstance(answered, dict):
                    return answered
            except (ConnectionRefusedError, FileNotFoundError):  # gone: killed, or stopped
                found = _read(self._file(number))
                return None if found is None else _without_gauges(found)
            except (OSError, TimeoutError, ValueError):
                pass  # busy, or cut off mid-answer: its file has what it last showed
        return _read(self._file(number))

    def _others(self) -> list[int]:
        """The numbers of the other workers that ever counted here (the living and the gone)."""
        try:
            names = os.listdir(self.directory)
        except OSError:
            return []
        found = {int(entry.group(1)) for name in names if (entry := _ENTRY.fullmatch(name))}
        return sorted(found - {self.number})

    def _file(self, number: int) -> Path:
        return self.directory / f"{number}.json"

    def _socket(self, number: int) -> str | None:
        path = str(self.directory / f"{number}.sock")
        return path if len(path.encode()) <= _MAX_SOCKET_PATH else None


def _read(path: Path) -> Snapshot | None:
    try:
        found = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def _without_gauges(snapshot: Snapshot) -> Snapshot:
    """What carries over from a worker that is gone: counters and histograms, not what was under
    way in it (open streams, queued background responses)."""
    return {**snapshot, "gauges": {}}
