"""A sandbox backend for the tests of what drives one (contract.sandboxes.protocol.SandboxBackend):
a host directory per sandbox for its /mnt/data, and a "kernel" that runs each cell in-process in a
dict of names, with its working directory that directory. It isolates nothing: it stands in for the
real backends (providers/sandboxes/) where what is under test is the caller's bookkeeping."""

from __future__ import annotations

import ast
import contextlib
import io
import os
import time
import traceback
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

from contract.errors import InvalidRequestError, NotFoundError
from contract.sandboxes.network import HostRule, check_allowed_domains, parse_host_rule
from contract.sandboxes.protocol import CellOutput, HeldSandbox, SandboxFile

__all__ = ["FakeSandboxes"]


class FakeSandboxes:
    """Sandboxes in `root/<sandbox id>/`; `calls` records each method called, with the sandbox id.
    `allowed_hosts` are the operator's (the domains a sandbox is given are kept in `domains`: the
    fake has no network to give)."""

    def __init__(self, root: Path, max_memory_bytes: int = 4 << 30, allowed_hosts: Sequence[str] = ()) -> None:
        self.root = root
        self._max_memory_bytes = max_memory_bytes
        self._allowed_hosts = tuple(parse_host_rule(host) for host in allowed_hosts)
        self.kernels: dict[str, dict[str, Any]] = {}
        self.memory: dict[str, int] = {}
        self.domains: dict[str, tuple[str, ...]] = {}
        self.calls: list[tuple[str, str]] = []
        self.created_at: dict[str, float] = {}
        """When each was made (a test may set one back in time)."""

    @property
    def max_memory_bytes(self) -> int:
        return self._max_memory_bytes

    def data_dir(self, sandbox_id: str) -> Path:
        return self.root / sandbox_id

    def exists(self, sandbox_id: str) -> bool:
        return self.data_dir(sandbox_id).is_dir()

    @property
    def allowed_hosts(self) -> tuple[HostRule, ...]:
        return self._allowed_hosts

    async def create(self, sandbox_id: str, memory_bytes: int, allowed_domains: Sequence[str] = ()) -> None:
        self.calls.append(("create", sandbox_id))
        if allowed_domains:
            self.domains[sandbox_id] = check_allowed_domains(list(allowed_domains), self.allowed_hosts, "network_policy.allowed_domains")
        self.data_dir(sandbox_id).mkdir(parents=True)
        self.memory[sandbox_id] = memory_bytes
        self.created_at[sandbox_id] = time.time()

    async def held(self) -> list[HeldSandbox]:
        return [HeldSandbox(sandbox_id, made) for sandbox_id, made in self.created_at.items() if self.exists(sandbox_id)]

    async def run(self, sandbox_id: str, code: str) -> CellOutput:
        self.calls.append(("run", sandbox_id))
        directory = self._existing(sandbox_id)
        fresh = sandbox_id not in self.kernels
        names = self.kernels.setdefault(sandbox_id, {"__name__": "__main__"})
        out = io.StringIO()
        status: Any = "completed"
        cwd = os.getcwd()
        os.chdir(directory)
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
                _run_cell(code, names)
        except Exception:
            out.write(traceback.format_exc())
            status = "failed"
        finally:
            os.chdir(cwd)
        return CellOutput(logs=out.getvalue(), status=status, fresh_kernel=fresh)

    async def stop(self, sandbox_id: str) -> None:
        self.calls.append(("stop", sandbox_id))
        self.kernels.pop(sandbox_id, None)

    async def destroy(self, sandbox_id: str) -> None:
        self.calls.append(("destroy", sandbox_id))
        self.kernels.pop(sandbox_id, None)
        directory = self.data_dir(sandbox_id)
        if directory.is_dir():
            for path in sorted(directory.rglob("*"), reverse=True):
                path.rmdir() if path.is_dir() else path.unlink()
            directory.rmdir()

    async def write_file(self, sandbox_id: str, path: str, data: bytes) -> SandboxFile:
        self.calls.append(("write_file", sandbox_id))
        target = self._path(sandbox_id, path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        return _entry(self._existing(sandbox_id), target)

    async def read_file(self, sandbox_id: str, path: str) -> AsyncIterator[bytes]:
        target = self._path(sandbox_id, path)
        if not target.is_file():
            raise NotFoundError(f"No file {path} in sandbox {sandbox_id}")
        data = target.read_bytes()
        for start in range(0, len(data), 4096):
            yield data[start:start + 4096]

    async def list_files(self, sandbox_id: str) -> list[SandboxFile]:
        directory = self._existing(sandbox_id)
        return sorted((_entry(directory, path) for path in directory.rglob("*") if path.is_file()), key=lambda file: file.path)

    async def delete_file(self, sandbox_id: str, path: str) -> None:
        target = self._path(sandbox_id, path)
        if not target.is_file():
            raise NotFoundError(f"No file {path} in sandbox {sandbox_id}")
        target.unlink()

    def _existing(self, sandbox_id: str) -> Path:
        directory = self.data_dir(sandbox_id)
        if not directory.is_dir():
            raise NotFoundError(f"No sandbox {sandbox_id}")
        return directory

    def _path(self, sandbox_id: str, path: str) -> Path:
        directory = self._existing(sandbox_id)
        if path.startswith("/") or ".." in path.split("/"):
            raise InvalidRequestError(f"The path {path!r} leaves /mnt/data.")
        return directory / path


def _run_cell(code: str, names: dict[str, Any]) -> None:
    """As a notebook does: the statements, then the last one's value printed if it is an expression."""
    tree = ast.parse(code)
    last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    exec(compile(tree, "<cell>", "exec"), names)
    if last is not None:
        value = eval(compile(ast.Expression(last.value), "<cell>", "eval"), names)
        if value is not None:
            print(repr(value))


def _entry(directory: Path, path: Path) -> SandboxFile:
    stat = path.stat()
    return SandboxFile(path.relative_to(directory).as_posix(), stat.st_size, stat.st_mtime_ns)
