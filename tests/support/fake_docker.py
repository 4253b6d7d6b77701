"""A fake Docker Engine on a unix socket: the part of the API the docker sandboxes use, over real HTTP/1.1.

A container is a directory (its filesystem: `/mnt/data` is `<root>/mnt/data`) and, once started, a
local process running its `Cmd` (the image's interpreter replaced by this one's). It isolates
nothing: it is here to hold the backend to the Engine's protocol (JSON calls, tar archives, the
hijacked attach stream with its frames), not to test Docker. Every request is kept in `requests`.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import shutil
import struct
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

__all__ = ["FakeEngine"]


@dataclass
class _Container:
    config: dict[str, Any]
    root: Path
    created: int = 0
    process: asyncio.subprocess.Process | None = None
    attached: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
    pumps: list[asyncio.Task[None]] = field(default_factory=list)

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.returncode is None


def _frame(stream: int, data: bytes) -> bytes:
    return struct.pack(">BxxxI", stream, len(data)) + data


class FakeEngine:
    def __init__(self, socket_path: Path, image: str = "python:3.12-slim") -> None:
        self.socket_path = socket_path
        self.image = image
        self.containers: dict[str, _Container] = {}
        self.execs: dict[str, dict[str, Any]] = {}
        self.requests: list[tuple[str, str, Any]] = []
        self.warnings: list[str] = []
        self._server: asyncio.Server | None = None
        self._top = Path(tempfile.mkdtemp(prefix="fake-docker-"))

    @property
    def url(self) -> str:
        return f"unix://{self.socket_path}"

    async def start(self) -> None:
        self._server = await asyncio.start_unix_server(self._connection, str(self.socket_path))

    async def close(self) -> None:
        for container in self.containers.values():
            await self._kill(container)
        if self._server is not None:
            self._server.close()
        shutil.rmtree(self._top, ignore_errors=True)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while True:
                head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
                method, target, _ = head[0].split(" ", 2)
                headers = {line.split(":", 1)[0].lower(): line.split(":", 1)[1].strip() for line in head[1:] if ":" in line}
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                url = urlsplit(target)
                path = unquote(url.path).removeprefix("/v1.41")
                query = {key: values[0] for key, values in parse_qs(url.query).items()}
                self.requests.append((method, path, json.loads(body) if body and body[:1] == b"{" else query))
                if path.endswith("/attach"):
                    writer.write(b"HTTP/1.1 101 UPGRADED\r\nContent-Type: application/vnd.docker.raw-stream\r\n"
                                 b"Connection: Upgrade\r\nUpgrade: tcp\r\n\r\n")
                    self.containers[path.split("/")[2]].attached = (reader, writer)
                    return  # the connection is the container's now
                status, kind, payload = await self._route(method, path, query, body)
                writer.write(f"HTTP/1.1 {status} X\r\nContent-Type: {kind}\r\nContent-Length: {len(payload)}\r\n\r\n".encode() + payload)
                await writer.drain()

    async def _route(self, method: str, path: str, query: dict[str, str], body: bytes) -> tuple[int, str, bytes]:
        parts = path.strip("/").split("/")
        try:
            if path == "/_ping":
                return 200, "text/plain", b"OK"
            if parts[0] == "images":
                return (200, "application/json", b"{}") if "/".join(parts[1:-1]) == self.image else _error(404, "no such image")
            if parts[0] == "exec":
                return await self._exec(method, parts[1], parts[2])
            if path == "/containers/create":
                return self._create(query["name"], json.loads(body))
            if path == "/containers/json":
                return 200, "application/json", json.dumps(self._listed(json.loads(query.get("filters") or "{}"))).encode()
            container = self.containers.get(parts[1])
            if container is None:
                return _error(404, f"No such container: {parts[1]}")
            return await self._container(method, container, parts[2] if len(parts) > 2 else "", query, body)
        except FileNotFoundError as error:
            return _error(404, str(error))

    def _create(self, name: str, config: dict[str, Any]) -> tuple[int, str, bytes]:
        if name in self.containers:
            return _error(409, f"Conflict. The container name {name} is already in use")
        root = self._top / name
        root.mkdir()
        self.containers[name] = _Container(config, root, created=int(time.time()))
        return 201, "application/json", json.dumps({"Id": name, "Warnings": self.warnings}).encode()

    def _listed(self, filters: dict[str, list[str]]) -> list[dict[str, Any]]:
        """`GET /containers/json?all=1`, filtered by the labels named (`label: [key]` or `[key=value]`)."""
        wanted = [label.partition("=") for label in filters.get("label", [])]
        return [{"Id": name, "Names": [f"/{name}"], "Labels": container.config.get("Labels") or {}, "Created": container.created}
                for name, container in self.containers.items()
                if all(key in (container.config.get("Labels") or {}) and (not equals or container.config["Labels"][key] == value)
                       for key, equals, value in wanted)]

    async def _container(self, method: str, container: _Container, action: str, query: dict[str, str],
                         body: bytes) -> tuple[int, str, bytes]:
        if action == "json":
            inspected = {"Config": {"User": container.config["User"]}, "HostConfig": container.config["HostConfig"],
                         "State": {"Running": container.running}}
            return 200, "application/json", json.dumps(inspected).encode()
        if action == "archive":
            return self._archive(method, container, query["path"], body)
        if action == "start":
            return (304, "text/plain", b"") if container.running else await self._start(container)
        if action == "kill":
            if not container.running:
                return _error(409, "is not running")
            await self._kill(container)
            return 204, "text/plain", b""
        if action == "exec":
            if not container.running:
                return _error(409, "is not running")
            exec_id = f"exec{len(self.execs)}"
            self.execs[exec_id] = {**json.loads(body), "root": container.root}
            return 201, "application/json", json.dumps({"Id": exec_id}).encode()
        if method == "DELETE":
            await self._kill(container)
            shutil.rmtree(container.root)
            del self.containers[next(name for name, value in self.containers.items() if value is container)]
            return 204, "text/plain", b""
        return _error(404, f"no route {method} {action}")

    def _archive(self, method: str, container: _Container, path: str, body: bytes) -> tuple[int, str, bytes]:
        target = container.root / path.lstrip("/")
        if method == "PUT":
            if not target.is_dir():
                raise FileNotFoundError(path)
            with tarfile.open(fileobj=io.BytesIO(body)) as tar:
                tar.extractall(target, filter="data")
            return 200, "text/plain", b""
        if not target.exists() and not target.is_symlink():
            raise FileNotFoundError(path)
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            tar.add(target, arcname=target.name)
        return 200, "application/x-tar", buffer.getvalue()

    async def _start(self, container: _Container) -> tuple[int, str, bytes]:
        command = [sys.executable, *container.config["Cmd"][1:]]
        environment = dict(item.split("=", 1) for item in container.config.get("Env", []))
        container.process = await asyncio.create_subprocess_exec(
            *command, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            cwd=container.root / "mnt" / "data", env={"PATH": "/usr/bin:/bin", **environment})
        if container.attached is not None:
            reader, writer = container.attached
            process = container.process
            assert process.stdout is not None and process.stderr is not None
            container.pumps = [asyncio.ensure_future(_out(process.stdout, writer, 1)),
                               asyncio.ensure_future(_out(process.stderr, writer, 2)),
                               asyncio.ensure_future(_in(reader, process))]
        return 204, "text/plain", b""

    async def _kill(self, container: _Container) -> None:
        if container.running:
            assert container.process is not None
            container.process.kill()
            await container.process.wait()
        for pump in container.pumps:
            pump.cancel()
        if container.attached is not None:
            container.attached[1].close()
            container.attached = None

    async def _exec(self, method: str, exec_id: str, action: str) -> tuple[int, str, bytes]:
        record = self.execs[exec_id]
        if action == "json":
            return 200, "application/json", json.dumps({"ExitCode": record["exit"]}).encode()
        workdir = record["root"] / record["WorkingDir"].lstrip("/")
        done = await asyncio.to_thread(subprocess.run, [sys.executable, *record["Cmd"][1:]], cwd=workdir, capture_output=True,
                                       check=False)
        record["exit"] = done.returncode
        return 200, "application/vnd.docker.raw-stream", _frame(1, done.stdout) + _frame(2, done.stderr)


def _error(status: int, message: str) -> tuple[int, str, bytes]:
    return status, "application/json", json.dumps({"message": message}).encode()


async def _out(stream: asyncio.StreamReader, writer: asyncio.StreamWriter, number: int) -> None:
    with contextlib.suppress(ConnectionError):
        while chunk := await stream.read(65536):
            writer.write(_frame(number, chunk))
            await writer.drain()
    if number == 1:
        writer.close()


async def _in(reader: asyncio.StreamReader, process: asyncio.subprocess.Process) -> None:
    assert process.stdin is not None
    with contextlib.suppress(ConnectionError):
        while chunk := await reader.read(65536):
            process.stdin.write(chunk)
            await process.stdin.drain()
