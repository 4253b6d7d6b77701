"""The Python kernel that runs inside a sandbox: one process per sandbox, cells in one namespace.

Run by the sandbox's own interpreter (the runtime venv's, or a container image's) as a script, so
it imports nothing but the standard library and nothing of this project:

    python kernel.py '{"max_output_bytes": 65536, "memory_bytes": ..., "cpu_s": ..., ...}'

It speaks on its stdin and stdout, each message a 4-byte big-endian length then that many bytes
of JSON: a request `{"code": "..."}`, a reply `{"logs", "images" (base64 PNGs), "status",
"truncated"}`. Before the first request it writes `{"ready": true}` once its limits are set.
`{"interrupt": true}`, sent while a cell runs, interrupts it.

With `"proxy_socket"` and `"proxy_port"` in its argument (a sandbox whose container allows
domains), it forwards each connection to 127.0.0.1:<proxy_port>, in the sandbox's own network
namespace, to the host's proxy on that Unix socket (`providers/sandboxes/egress.py`, which judges
every request); the code's HTTP_PROXY and HTTPS_PROXY name that port. The forwarder is plain bytes
and decides nothing: code that bypasses it reaches the same socket, and nothing else.

Why hand-written rather than ipykernel and jupyter_client: those speak ZeroMQ over sockets, and a
sandbox has no network at all (not even loopback that the host could reach); they need pyzmq and
jupyter_client on the host and ipykernel in every runtime image; and a round trip through them
costs milliseconds where a pipe costs about one. What a notebook does that a code interpreter
needs (a persistent namespace, the last expression's value, a traceback, figures, an interrupt)
is the hundred lines below.

The host interrupts a cell that runs too long by an `interrupt` message, which a thread turns into
a SIGINT to the kernel itself: a real signal, so that a blocking call (`time.sleep`, a read) ends
too, and the same on every backend (the host need not know the kernel's pid in its namespace). The
cell ends as `timeout` and the kernel goes on. A SIGINT between cells (a race with a cell that
just ended) is ignored. If the code blocks SIGINT, the host kills the sandbox after a grace period.
"""

from __future__ import annotations

import ast
import base64
import io
import json
import os
import queue
import resource
import select
import signal
import socket
import struct
import sys
import threading
import time
import traceback
from types import FrameType
from typing import Any, BinaryIO

_HEADER = struct.Struct(">I")
_in_cell = False
_KERNEL_PID = os.getpid()


class _Output(io.TextIOBase):
    """stdout and stderr of the user's code, interleaved in one buffer, cut at a byte budget."""

    def __init__(self, parts: list[str], budget: list[int], truncated: list[bool]) -> None:
        self.parts, self.budget, self.truncated = parts, budget, truncated

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        if self.budget[0] <= 0:
            self.truncated[0] = self.truncated[0] or bool(text)
            return len(text)
        data = text.encode("utf-8", "replace")
        if len(data) > self.budget[0]:
            data = data[: self.budget[0]]
            self.truncated[0] = True
        self.budget[0] -= len(data)
        self.parts.append(data.decode("utf-8", "ignore"))
        return len(text)


def _on_sigint(_signum: int, _frame: FrameType | None) -> None:
    if _in_cell:
        raise KeyboardInterrupt


def _set_limits(limits: dict[str, int]) -> None:
    """Soft and hard alike, so that the code cannot raise them again."""
    for name, key in (("RLIMIT_AS", "memory_bytes"), ("RLIMIT_CPU", "cpu_s"), ("RLIMIT_FSIZE", "max_file_bytes"),
                      ("RLIMIT_NPROC", "max_processes")):
        if limits.get(key):
            resource.setrlimit(getattr(resource, name), (limits[key], limits[key]))


def _read(stream: BinaryIO) -> dict[str, Any] | None:
    header = stream.read(_HEADER.size)
    if len(header) < _HEADER.size:
        return None
    (size,) = _HEADER.unpack(header)
    request: dict[str, Any] = json.loads(stream.read(size))
    return request


def _write(stream: BinaryIO, message: dict[str, Any]) -> None:
    data = json.dumps(message).encode()
    stream.write(_HEADER.pack(len(data)) + data)
    stream.flush()


def _compile(code: str) -> tuple[Any, Any]:
    """The cell's statements, and its last statement apart when it is an expression to show."""
    tree = ast.parse(code, "<cell>", "exec")
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body[-1].value)
        tree.body.pop()
    return compile(tree, "<cell>", "exec"), None if last is None else compile(last, "<cell>", "eval")


def _traceback(error: BaseException) -> str:
    """The traceback from the cell's own frames down: the kernel's frames are of no use to the user."""
    tb = error.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != "<cell>":
        tb = tb.tb_next
    if isinstance(error, SyntaxError):
        tb = None
    return "".join(traceback.format_exception(type(error), error, tb))


def _figures() -> list[str]:
    """Each open matplotlib figure as a base64 PNG, closed once taken; none if matplotlib is not in use."""
    pyplot = sys.modules.get("matplotlib.pyplot")
    if pyplot is None:
        return []
    images = []
    for number in pyplot.get_fignums():
        figure = pyplot.figure(number)
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png")
        images.append(base64.b64encode(buffer.getvalue()).decode())
        pyplot.close(figure)
    return images


def _run_cell(code: str, namespace: dict[str, Any], out: _Output) -> str:
    global _in_cell
    status = "completed"
    _in_cell = True
    try:
        body, last = _compile(code)
        exec(body, namespace)
        if last is not None:
            value = eval(last, namespace)
            if value is not None:
                namespace["_"] = value
                out.write(repr(value) + "\n")
    except KeyboardInterrupt:
        _in_cell = False
        status = "timeout"
        out.write("KeyboardInterrupt: the cell ran past its time limit and was interrupted\n")
    except BaseException as error:  # SystemExit too: the kernel outlives the code's exit()
        _in_cell = False
        status = "failed"
        out.write(_traceback(error))
    finally:
        _in_cell = False
    return status


def _cell(code: str, namespace: dict[str, Any], limit: int) -> dict[str, Any]:
    parts: list[str] = []
    truncated = [False]
    out = _Output(parts, [limit], truncated)
    sys.stdout = sys.stderr = out
    try:
        status = _run_cell(code, namespace, out)
        if os.getpid() != _KERNEL_PID:
            # A child the code forked came back out of the cell: it must not answer on the kernel's pipe.
            os._exit(0 if status == "completed" else 1)
        try:
            images = _figures()
        except Exception as error:
            images = []
            out.write(f"the figures could not be saved: {error!r}\n")
    finally:
        sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
    return {"logs": "".join(parts), "images": images, "status": status, "truncated": truncated[0]}


def main() -> None:
    limits = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
    # The protocol keeps the real stdin and stdout; the code gets an empty stdin, and what
    # subprocesses write to fd 1 goes to fd 2, so no print can corrupt a reply.
    requests = os.fdopen(os.dup(0), "rb")
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    os.dup2(2, 1)
    sys.stdin = io.StringIO("")
    os.environ.setdefault("MPLBACKEND", "Agg")
    signal.signal(signal.SIGINT, _on_sigint)
    if limits.get("proxy_socket"):
        _forward(str(limits["proxy_socket"]), int(limits["proxy_port"]))
    _set_limits(limits)
    namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": __builtins__}
    cells: queue.Queue[str | None] = queue.Queue()
    threading.Thread(target=_listen, args=(requests, cells), daemon=True).start()
    _write(replies, {"ready": True})
    while True:
        try:
            code = cells.get()
        except KeyboardInterrupt:
            continue
        if code is None:
            return
        _write(replies, _cell(code, namespace, int(limits.get("max_output_bytes", 65536))))


def _listen(requests: BinaryIO, cells: queue.Queue[str | None]) -> None:
    """Reads requests while cells run, so that an interrupt reaches a busy kernel."""
    while (request := _read(requests)) is not None:
        if request.get("interrupt"):
            os.kill(os.getpid(), signal.SIGINT)
        else:
            cells.put(str(request.get("code", "")))
    cells.put(None)


def _forward(socket_path: str, port: int) -> None:
    listener = socket.create_server(("127.0.0.1", port))
    threading.Thread(target=_accept, args=(listener, socket_path), daemon=True).start()


def _accept(listener: socket.socket, socket_path: str) -> None:
    while True:
        try:
            client, _ = listener.accept()
        except OSError:
            time.sleep(0.1)  # out of descriptors, say: the code's to fix; the next accept may do
            continue
        try:
            threading.Thread(target=_relay, args=(client, socket_path), daemon=True).start()
        except RuntimeError:  # no thread to be had (the sandbox's process limit): this connection is dropped
            client.close()


def _relay(client: socket.socket, socket_path: str) -> None:
    """Bytes both ways between the code's connection and the host's proxy; an end's EOF is passed on as a half-close."""
    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with client, upstream:
        try:
            upstream.connect(socket_path)
        except OSError:
            return
        peers = {client: upstream, upstream: client}
        while peers:
            ready, _, _ = select.select(list(peers), [], [])
            for source in ready:
                try:
                    data = source.recv(65536)
                    if data:
                        peers[source].sendall(data)
                        continue
                    peers[source].shutdown(socket.SHUT_WR)
                except OSError:
                    return
                del peers[source]


if __name__ == "__main__":
    main()
