"""The host's side of `providers.sandboxes.kernel`: one kernel's pipe, its cells, its time limit.

Every backend reaches its kernel by some pair of byte streams (a child's stdin and stdout, a Docker
attach connection); `Pipe` is that pair, and `Kernel` speaks the driver's protocol over it.
`Kernels` keeps one kernel per sandbox, started by the first cell, one cell at a time.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import struct
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from contract.sandboxes.protocol import CellOutput

__all__ = ["DRIVER", "GRACE_S", "Kernel", "KernelDied", "Kernels", "Pipe", "kernel_arguments"]

log = logging.getLogger("stack")

DRIVER = Path(__file__).with_name("kernel.py")
"""The driver's source, bound or copied into each sandbox."""

GRACE_S = 1.0
"""How long an interrupted cell has to end before its sandbox's kernel is killed."""

_HEADER = struct.Struct(">I")


class KernelDied(Exception):
    """The kernel's pipe closed: it was killed (a limit, the host) or it never started."""


class Pipe(Protocol):
    async def send(self, data: bytes) -> None: ...

    async def receive(self, size: int) -> bytes:
        """Exactly `size` bytes; raises `KernelDied` if the stream ends first."""

    async def kill(self) -> None:
        """End the kernel and everything it started; idempotent."""


def kernel_arguments(*, max_output_bytes: int, memory_bytes: int, cpu_s: int, max_file_bytes: int, max_processes: int,
                     proxy: tuple[str, int] | None = None) -> str:
    """The driver's one argument: the limits it sets on itself before it takes a cell, and (`proxy`: the
    socket inside, the port) where it forwards the code's proxy connections, if it has network."""
    arguments: dict[str, Any] = {"max_output_bytes": max_output_bytes, "memory_bytes": memory_bytes, "cpu_s": cpu_s,
                                 "max_file_bytes": max_file_bytes, "max_processes": max_processes}
    if proxy is not None:
        arguments.update(proxy_socket=proxy[0], proxy_port=proxy[1])
    return json.dumps(arguments)


class Kernel:
    def __init__(self, pipe: Pipe, cell_timeout_s: float) -> None:
        self.pipe = pipe
        self.cell_timeout_s = cell_timeout_s
        self.alive = True

    async def _send(self, message: dict[str, Any]) -> None:
        data = json.dumps(message).encode()
        await self.pipe.send(_HEADER.pack(len(data)) + data)

    async def _receive(self) -> dict[str, Any]:
        (size,) = _HEADER.unpack(await self.pipe.receive(_HEADER.size))
        message: dict[str, Any] = json.loads(await self.pipe.receive(size))
        return message

    async def started(self, timeout_s: float) -> None:
        """Wait for the driver's `ready`; kill it and raise `KernelDied` if it does not come."""
        try:
            async with asyncio.timeout(timeout_s):
                if not (await self._receive()).get("ready"):
                    raise KernelDied("the kernel did not say it was ready")
        except (TimeoutError, KernelDied, ValueError) as error:
            await self.kill()
            raise KernelDied(f"the kernel did not start: {error or 'no answer in time'}") from None

    async def run(self, code: str) -> CellOutput:
        """One cell. A kernel that dies or must be killed is left `alive = False`."""
        try:
            await self._send({"code": code})
            reply = asyncio.ensure_future(self._receive())
            done, _ = await asyncio.wait({reply}, timeout=self.cell_timeout_s)
            if not done:
                await self._send({"interrupt": True})
                done, _ = await asyncio.wait({reply}, timeout=GRACE_S)
            if not done:
                reply.cancel()
                await self.kill()
                return CellOutput(logs=f"The cell ran past its time limit of {self.cell_timeout_s:g} s and did not stop when "
                                       "interrupted: its kernel was killed.\n", status="timeout")
            return _output(reply.result())
        except (KernelDied, ValueError) as error:
            await self.kill()
            return CellOutput(logs=f"The kernel died while running the cell ({error}): it went past a limit of the sandbox "
                                   "(memory, CPU time) or was killed. The next cell runs in a new kernel.\n", status="failed")

    async def kill(self) -> None:
        self.alive = False
        await self.pipe.kill()


def _output(reply: dict[str, Any]) -> CellOutput:
    status = reply.get("status")
    return CellOutput(logs=str(reply.get("logs", "")), images=tuple(base64.b64decode(image) for image in reply.get("images", ())),
                      status=status if status in ("completed", "failed", "timeout") else "failed",
                      truncated=bool(reply.get("truncated")))


@dataclass
class _Slot:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    kernel: Kernel | None = None
    last_used: float = field(default_factory=time.monotonic)


class Kernels:
    """One kernel per sandbox in this process, started by `start` on the first cell."""

    def __init__(self, start: Callable[[str], Awaitable[Kernel]]) -> None:
        self._start = start
        self._slots: dict[str, _Slot] = {}
        self._idle_watch: asyncio.Task[None] | None = None

    async def run(self, sandbox_id: str, code: str) -> CellOutput:
        slot = self._slots.setdefault(sandbox_id, _Slot())
        async with slot.lock:
            fresh = slot.kernel is None or not slot.kernel.alive
            if fresh:
                slot.kernel = await self._start(sandbox_id)
            assert slot.kernel is not None
            output = await slot.kernel.run(code)
            slot.last_used = time.monotonic()
        if fresh:
            output = CellOutput(output.logs, output.images, output.status, output.truncated, fresh_kernel=True)
        return output

    async def stop(self, sandbox_id: str) -> None:
        slot = self._slots.pop(sandbox_id, None)
        if slot is not None and slot.kernel is not None:
            await slot.kernel.kill()

    def running(self) -> list[str]:
        return [sandbox_id for sandbox_id, slot in self._slots.items() if slot.kernel is not None and slot.kernel.alive]

    async def stop_idle(self, idle_s: float) -> None:
        """Stop the kernels that ran no cell for `idle_s` (their sandboxes' files stay)."""
        now = time.monotonic()
        for sandbox_id, slot in list(self._slots.items()):
            if not slot.lock.locked() and now - slot.last_used > idle_s:
                await self.stop(sandbox_id)

    def watch_idle(self, idle_s: float | None) -> None:
        """From now until `stop_all`, stop the kernels idle for `idle_s` (looked for at least once a
        minute); nothing without a limit."""
        if idle_s is not None:
            self._idle_watch = asyncio.get_running_loop().create_task(self._stop_idle_every(idle_s))

    async def _stop_idle_every(self, idle_s: float) -> None:
        while True:
            await asyncio.sleep(min(idle_s, 60.0))
            try:
                await self.stop_idle(idle_s)
            except Exception:  # a kill that failed: the next round tries again
                log.exception("stopping idle sandbox kernels failed")

    async def stop_all(self) -> None:
        if self._idle_watch is not None:
            self._idle_watch.cancel()
        await asyncio.gather(*(self.stop(sandbox_id) for sandbox_id in list(self._slots)), return_exceptions=True)
