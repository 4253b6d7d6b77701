"""Signals between the processes of one machine that share an SQLite database (`stack run
--workers N`, or a server and a script on one state directory): what PostgreSQL's LISTEN/NOTIFY
does for replicas, so a cancel sent to one worker reaches the worker running the response at
once, and a stream followed on one worker wakes when another logs its events.

Each process binds a Unix datagram socket and registers it by name in a directory beside the
database (`stack.db.signals/`); `send` puts the message in every other registered socket.
Written here because SQLite has no notification of its own and the standard library's sockets are
all it takes (a broker such as Redis would be one more thing to run for a single machine).

Signals are hints, as NOTIFY is: a full socket buffer or a process that is gone drops the
message, and the receivers still find out by their lease renewal or poll. A process that died
leaves its registration behind; the first send that finds nobody at its address removes it.
On Linux the sockets are in the abstract namespace (no file, no 108-byte path limit); elsewhere
they are files in the directory, and a directory too deep for a socket path leaves signals within
each process.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import secrets
import socket
import sys
from collections.abc import Callable
from pathlib import Path

__all__ = ["MachineSignals"]

log = logging.getLogger("stack.signals")

_MAX_MESSAGE = 64 * 1024
_MAX_SOCKET_PATH = 100  # sun_path is 104 to 108 bytes depending on the system


class MachineSignals:
    """This process's end of the signals of one database (see the module's docstring)."""

    def __init__(self, directory: Path, deliver: Callable[[str, str], None]) -> None:
        self.directory = directory
        self.deliver = deliver
        """Called with (channel, payload) for each message another process sends."""
        self.name = f"{os.getpid()}-{secrets.token_hex(6)}"
        self._socket: socket.socket | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._warned = False
        self._namespace = hashlib.sha256(str(directory.resolve()).encode()).hexdigest()[:20]

    def _address(self, name: str) -> str | None:
        if sys.platform == "linux":
            return f"\0stack-signals-{self._namespace}-{name}"
        path = str(self.directory / f"{name}.sock")
        return path if len(path.encode()) <= _MAX_SOCKET_PATH else None

    def start(self) -> bool:
        """Bind this process's socket and register it (once; later calls do nothing). False if
        this system cannot have one here (signals then stay within the process)."""
        loop = asyncio.get_running_loop()
        if self._socket is not None:
            if self._loop is not loop:  # the database is used from another event loop now (tests make one per test)
                if self._loop is not None and not self._loop.is_closed() and not self._loop.is_running():
                    self._loop.remove_reader(self._socket.fileno())
                loop.add_reader(self._socket.fileno(), self._readable)
                self._loop = loop
            return True
        address = self._address(self.name)
        if address is None:
            return False
        endpoint = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            endpoint.setblocking(False)
            endpoint.bind(address)
            (self.directory / self.name).touch()
            loop.add_reader(endpoint.fileno(), self._readable)
        except OSError as error:  # signals are hints: without them, leases and polls still tell
            endpoint.close()
            if not self._warned:
                log.warning("signals to the other processes of %s are off: %s", self.directory, error)
                self._warned = True
            return False
        except BaseException:
            endpoint.close()
            raise
        self._socket, self._loop = endpoint, loop
        return True

    def send(self, channel: str, payload: str) -> None:
        """Put `payload` on `channel` in every other registered process (not this one)."""
        if not self.start() or self._socket is None:
            return
        message = f"{channel}\n{payload}".encode()
        if len(message) > _MAX_MESSAGE:
            log.warning("a signal on %s was too long to send (%d bytes)", channel, len(message))
            return
        try:
            peers = os.listdir(self.directory)
        except FileNotFoundError:
            return
        for peer in peers:
            if peer == self.name or peer.endswith(".sock"):
                continue
            address = self._address(peer)
            if address is None:
                continue
            try:
                self._socket.sendto(message, address)
            except (ConnectionRefusedError, FileNotFoundError):  # its process is gone
                with contextlib.suppress(FileNotFoundError):
                    (self.directory / peer).unlink()
                if not address.startswith("\0"):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(address)
            except BlockingIOError:
                pass  # its buffer is full: it finds out by its poll or lease, as without signals
            except OSError as error:
                log.warning("a signal to %s on %s was not sent: %s", peer, channel, error)

    def _readable(self) -> None:
        endpoint = self._socket
        while endpoint is not None:
            try:
                data = endpoint.recv(_MAX_MESSAGE)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as error:
                log.warning("reading signals failed: %s", error)
                return
            channel, _, payload = data.decode("utf-8", "replace").partition("\n")
            self.deliver(channel, payload)

    def close(self) -> None:
        """Unregister and close this process's socket (it may be started again)."""
        endpoint, self._socket = self._socket, None
        if endpoint is None:
            return
        if self._loop is not None and not self._loop.is_closed():
            with contextlib.suppress(RuntimeError):  # a loop of another thread
                self._loop.remove_reader(endpoint.fileno())
        endpoint.close()
        with contextlib.suppress(FileNotFoundError):
            (self.directory / self.name).unlink()
        address = self._address(self.name)
        if address is not None and not address.startswith("\0"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(address)
