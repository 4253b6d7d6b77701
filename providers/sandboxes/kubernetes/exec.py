"""`pods/exec` over a WebSocket, the `v4.channel.k8s.io` subprotocol: every binary message starts
with a channel byte, 0 stdin (ours), 1 stdout, 2 stderr, 3 the exec's end (a JSON `Status`, then
the server closes). v4 has no way to close stdin alone (v5 added one, newer clusters only), so a
command that takes input is told its length and reads exactly that much.

The kernel is one long exec (`ExecPipe`); files and kills are short ones (`run_command`).
"""

from __future__ import annotations

import collections
import contextlib
import json
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from urllib.parse import quote, urlencode

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.typing import Subprotocol

from providers.sandboxes.kernel_client import KernelDied
from providers.sandboxes.kubernetes.api import ApiError, Cluster

__all__ = ["CONTAINER", "Completed", "ExecPipe", "ExecStream", "exit_code", "open_exec", "run_command"]

CONTAINER = "sandbox"
"""The name of the pod's one container."""

_PROTOCOL = Subprotocol("v4.channel.k8s.io")
_STDIN, _STDOUT, _STDERR, _STATUS = 0, 1, 2, 3
_CHUNK = 256 * 1024
_CLOSE_TIMEOUT_S = 2.0


@dataclass(frozen=True)
class Completed:
    exit_code: int
    stdout: bytes
    stderr: bytes


class ExecStream:
    """One exec's WebSocket: stdin one way, (channel, bytes) messages the other."""

    def __init__(self, socket: ClientConnection) -> None:
        self.socket = socket

    async def send(self, data: bytes) -> None:
        # In pieces: the API server and the kubelet each buffer a whole message.
        for start in range(0, len(data), _CHUNK):
            await self.socket.send(bytes([_STDIN]) + data[start:start + _CHUNK])

    async def next(self) -> tuple[int, bytes] | None:
        """The next message with a channel (empty ones are skipped); None once the socket closed."""
        while True:
            try:
                message = await self.socket.recv(decode=False)
            except ConnectionClosed:
                return None
            if message:
                return message[0], bytes(message[1:])

    async def close(self) -> None:
        with contextlib.suppress(OSError, ConnectionClosed):
            await self.socket.close()


def _exec_url(cluster: Cluster, namespace: str, pod: str, command: list[str]) -> str:
    base = cluster.api_url.rstrip("/").replace("https://", "wss://", 1).replace("http://", "ws://", 1)
    query = urlencode([*(("command", part) for part in command), ("container", CONTAINER), ("stdin", "true"),
                       ("stdout", "true"), ("stderr", "true")])
    return f"{base}/api/v1/namespaces/{quote(namespace)}/pods/{quote(pod)}/exec?{query}"


async def open_exec(cluster: Cluster, namespace: str, pod: str, command: list[str], timeout_s: float) -> ExecStream:
    """Start `command` in the pod's container; raises `ApiError` if the API refuses (404: no such pod)."""
    context: ssl.SSLContext | None = cluster.ssl_context()
    try:
        socket = await connect(_exec_url(cluster, namespace, pod, command), subprotocols=[_PROTOCOL], ssl=context,
                               additional_headers=cluster.headers(), open_timeout=timeout_s, close_timeout=_CLOSE_TIMEOUT_S, max_size=None, proxy=None,
                               compression=None, user_agent_header="stack-sandboxes")
    except InvalidStatus as error:
        body = error.response.body or b""
        try:
            message = str(json.loads(body).get("message", body.decode(errors="replace")))
        except ValueError:
            message = body.decode(errors="replace")
        raise ApiError(error.response.status_code, f"exec in pod {pod} refused: {message[:300]}") from None
    if socket.subprotocol != _PROTOCOL:
        await socket.close()
        raise ApiError(500, f"the API does not speak {_PROTOCOL} for exec (it chose {socket.subprotocol!r})")
    return ExecStream(socket)


def exit_code(status: bytes) -> int:
    """The exit code a channel-3 `Status` gives; raises `ApiError` for an exec that failed to run at all."""
    document = json.loads(status or b"{}")
    if document.get("status") == "Success":
        return 0
    if document.get("reason") == "NonZeroExitCode":
        for cause in document.get("details", {}).get("causes", ()):
            if cause.get("reason") == "ExitCode":
                return int(cause.get("message", 1))
    raise ApiError(500, f"the exec failed: {str(document.get('message', document))[:300]}")


async def run_command(cluster: Cluster, namespace: str, pod: str, command: list[str], stdin: bytes, timeout_s: float) -> Completed:
    """Run a command to its end: its exit code and everything it wrote."""
    stream = await open_exec(cluster, namespace, pod, command, timeout_s)
    out, err, status = bytearray(), bytearray(), None
    try:
        await stream.send(stdin)
        while (message := await stream.next()) is not None:
            channel, payload = message
            if channel == _STDOUT:
                out += payload
            elif channel == _STDERR:
                err += payload
            elif channel == _STATUS:
                status = payload
    finally:
        await stream.close()
    if status is None:
        raise ApiError(502, f"the exec in pod {pod} ended without a status: {err.decode(errors='replace')[-300:]}")
    return Completed(exit_code(status), bytes(out), bytes(err))


class ExecPipe:
    """A `kernel_client.Pipe` over the kernel's exec. `kill` is set by the backend once the kernel
    said which process group it leads: closing the socket alone need not end a process that is busy."""

    def __init__(self, stream: ExecStream) -> None:
        self.stream = stream
        self.buffer = bytearray()
        self.stderr: collections.deque[bytes] = collections.deque(maxlen=16)
        self.on_kill: Callable[[], Awaitable[None]] | None = None

    async def send(self, data: bytes) -> None:
        try:
            await self.stream.send(data)
        except ConnectionClosed as error:
            raise KernelDied("the exec's connection closed") from error

    async def receive(self, size: int) -> bytes:
        while len(self.buffer) < size:
            message = await self.stream.next()
            if message is None:
                raise KernelDied(b"".join(self.stderr).decode(errors="replace")[-500:] or "the kernel's exec ended")
            channel, payload = message
            if channel == _STDOUT:
                self.buffer += payload
            elif channel == _STDERR:
                self.stderr.append(payload)
        data = bytes(self.buffer[:size])
        del self.buffer[:size]
        return data

    async def kill(self) -> None:
        # The process first: the API closes the socket once the exec ended, rather than keep a busy one open.
        on_kill, self.on_kill = self.on_kill, None
        if on_kill is not None:
            await on_kill()
        await self.stream.close()
