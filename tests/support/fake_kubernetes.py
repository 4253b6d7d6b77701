"""A fake Kubernetes API on 127.0.0.1: the part the kubernetes sandboxes use, over real HTTP/1.1
and a real WebSocket for `pods/exec` (the `v4.channel.k8s.io` subprotocol, its channel bytes and
its closing `Status`).

A pod is a directory (`<root>/mnt/data` is its /mnt/data, `<root>/tmp` its /tmp) and an exec a
local process run there (the image's interpreter replaced by this one's). It isolates nothing: it
is here to hold the backend to the API's protocol, not to test Kubernetes. Pods start `Pending`
and run from the second look; a pod whose image is not `image` waits in `ErrImagePull`. Every
REST request is kept in `requests` (method, path, query), every exec's command in `execs`; `admission`, when set,
changes each pod as a mutating webhook would; `network_policies` are the namespace's.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from websockets.exceptions import InvalidState
from websockets.frames import Frame, Opcode
from websockets.protocol import State
from websockets.server import ServerProtocol
from websockets.typing import Subprotocol

__all__ = ["DENY_EGRESS", "FakeKubernetes"]

_V4 = Subprotocol("v4.channel.k8s.io")
_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
DENY_EGRESS: dict[str, Any] = {
    "metadata": {"name": "no-network"},
    "spec": {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "stack-sandbox"}}, "policyTypes": ["Ingress", "Egress"]}}
"""The namespace's one policy unless a test changes `network_policies`: the sandboxes' pods get no network."""


@dataclass
class _Pod:
    manifest: dict[str, Any]
    root: Path
    created: str = ""
    looks: int = 0
    processes: list[asyncio.subprocess.Process] = field(default_factory=list)

    def running(self) -> list[asyncio.subprocess.Process]:
        return [process for process in self.processes if process.returncode is None]


def _status(code: int, reason: str, message: str) -> tuple[int, dict[str, Any]]:
    return code, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message, "reason": reason, "code": code}


def _exit_status(code: int) -> dict[str, Any]:
    if code == 0:
        return {"metadata": {}, "status": "Success"}
    return {"metadata": {}, "status": "Failure", "reason": "NonZeroExitCode",
            "message": f"command terminated with non-zero exit code: {code}",
            "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]}}


class FakeKubernetes:
    def __init__(self, token: str = "sandbox-token", namespace: str = "sandboxes", image: str = "python:3.12-slim") -> None:
        self.token, self.namespace, self.image = token, namespace, image
        self.pods: dict[str, _Pod] = {}
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self.execs: list[list[str]] = []
        self.admission: Callable[[dict[str, Any]], None] | None = None
        self.network_policies: list[dict[str, Any]] = [DENY_EGRESS]
        self._server: asyncio.Server | None = None
        self._top = Path(tempfile.mkdtemp(prefix="fake-kubernetes-"))

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.sockets[0].getsockname()[:2]
        return f"http://{host}:{port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._connection, "127.0.0.1", 0)

    async def close(self) -> None:
        for pod in self.pods.values():
            await _kill(pod)
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
                path, query = unquote(url.path), parse_qs(url.query)
                if headers.get("authorization") != f"Bearer {self.token}":
                    status, payload = _status(401, "Unauthorized", "Unauthorized")
                elif path.endswith("/exec") and headers.get("upgrade", "").lower() == "websocket":
                    pod = self.pods.get(path.split("/")[-2])
                    if pod is not None:
                        await self._exec(pod, query["command"], headers, reader, writer)
                        return  # the connection was the exec's
                    status, payload = _status(404, "NotFound", f'pods "{path.split("/")[-2]}" not found')
                else:
                    self.requests.append((method, path, {key: values[0] for key, values in query.items()}))
                    status, payload = await self._route(method, path, query, body)
                data = json.dumps(payload).encode()
                writer.write(f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n".encode()
                             + data)
                await writer.drain()

    async def _route(self, method: str, path: str, query: dict[str, list[str]], body: bytes) -> tuple[int, dict[str, Any]]:
        if path == "/version":
            return 200, {"major": "1", "minor": "30", "gitVersion": "v1.30.0-fake"}
        if path == f"/apis/networking.k8s.io/v1/namespaces/{self.namespace}/networkpolicies":
            return 200, {"kind": "NetworkPolicyList", "items": self.network_policies}
        parts = path.strip("/").split("/")  # api v1 namespaces <ns> pods [<name>]
        if parts[:3] != ["api", "v1", "namespaces"] or len(parts) < 5 or parts[4] != "pods":
            return _status(404, "NotFound", f"no route {method} {path}")
        if parts[3] != self.namespace:
            return _status(404, "NotFound", f'namespaces "{parts[3]}" not found')
        if len(parts) == 5 and method == "POST":
            return self._create(json.loads(body), dry_run=query.get("dryRun") == ["All"])
        if len(parts) == 5 and method == "GET":
            return 200, {"kind": "PodList", "items": self._listed((query.get("labelSelector") or [""])[0])}
        pod = self.pods.get(parts[5]) if len(parts) > 5 else None
        if pod is None:
            return _status(404, "NotFound", f'pods "{parts[5] if len(parts) > 5 else ""}" not found')
        if method == "DELETE":
            await _kill(pod)
            shutil.rmtree(pod.root, ignore_errors=True)
            del self.pods[parts[5]]
            return 200, pod.manifest
        pod.looks += 1
        return 200, {**pod.manifest, "status": self._pod_status(pod)}

    def _create(self, manifest: dict[str, Any], dry_run: bool) -> tuple[int, dict[str, Any]]:
        if self.admission is not None:
            self.admission(manifest)
        # As the API stores it: a memory quantity in its canonical form.
        limits = manifest["spec"]["containers"][0]["resources"]["limits"]
        if int(limits["memory"]) % (1 << 30) == 0:
            limits["memory"] = f"{int(limits['memory']) >> 30}Gi"
        name = manifest["metadata"]["name"]
        if dry_run:
            return 201, manifest
        if name in self.pods:
            return _status(409, "AlreadyExists", f'pods "{name}" already exists')
        root = self._top / name
        (root / "mnt" / "data").mkdir(parents=True)
        (root / "tmp").mkdir()
        self.pods[name] = _Pod(manifest, root, created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        return 201, {**manifest, "status": {"phase": "Pending"}}

    def _listed(self, selector: str) -> list[dict[str, Any]]:
        """The pods whose labels match an equality selector (`key=value,key=value`), with their creation time."""
        wanted = [term.partition("=")[::2] for term in selector.split(",") if term]
        return [{**pod.manifest, "metadata": {**pod.manifest["metadata"], "creationTimestamp": pod.created}} for pod in self.pods.values()
                if all(pod.manifest["metadata"].get("labels", {}).get(key) == value for key, value in wanted)]

    def _pod_status(self, pod: _Pod) -> dict[str, Any]:
        if pod.looks < 2:
            return {"phase": "Pending"}
        if pod.manifest["spec"]["containers"][0]["image"] != self.image:
            waiting = {"reason": "ErrImagePull", "message": f"pull access denied for {pod.manifest['spec']['containers'][0]['image']}"}
            return {"phase": "Pending", "containerStatuses": [{"name": "sandbox", "state": {"waiting": waiting}}]}
        return {"phase": "Running", "containerStatuses": [{"name": "sandbox", "state": {"running": {}}}]}

    async def _exec(self, pod: _Pod, command: list[str], headers: dict[str, str], reader: asyncio.StreamReader,
                    writer: asyncio.StreamWriter) -> None:
        if _V4 not in [part.strip() for part in headers.get("sec-websocket-protocol", "").split(",")]:
            writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
            writer.close()
            return
        # The handshake by hand: websockets' own parser refuses a request line past 8 KiB, and an exec's
        # command (the driver's source) is longer; the API server takes up to 1 MiB of headers.
        accept = base64.b64encode(hashlib.sha1(headers["sec-websocket-key"].encode() + _GUID).digest()).decode()
        writer.write(f"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                     f"Sec-WebSocket-Accept: {accept}\r\nSec-WebSocket-Protocol: {_V4}\r\n\r\n".encode())
        protocol = ServerProtocol(state=State.OPEN, max_size=None)
        self.execs.append(command)
        container = pod.manifest["spec"]["containers"][0]
        environment = {item["name"]: self._host_path(pod, item["value"]) for item in container.get("env", [])}
        process = await asyncio.create_subprocess_exec(
            sys.executable, *command[1:], stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, cwd=pod.root / "mnt" / "data", env={"PATH": "/usr/bin:/bin", **environment})
        pod.processes.append(process)

        def send(channel: int, data: bytes) -> None:
            with contextlib.suppress(InvalidState):
                protocol.send_binary(bytes([channel]) + data)
            if not writer.is_closing():
                writer.write(b"".join(protocol.data_to_send()))

        for channel in (1, 2):
            send(channel, b"")  # empty messages: a client must skip them
        inbound = asyncio.ensure_future(_stdin(protocol, reader, writer, process))
        assert process.stdout is not None and process.stderr is not None
        await asyncio.gather(_out(process.stdout, 1, send), _out(process.stderr, 2, send))
        send(3, json.dumps(_exit_status(await process.wait())).encode())
        with contextlib.suppress(InvalidState):
            protocol.send_close(1000)
        if not writer.is_closing():
            writer.write(b"".join(protocol.data_to_send()))
        inbound.cancel()
        with contextlib.suppress(ConnectionError):
            await writer.drain()
        writer.close()

    @staticmethod
    def _host_path(pod: _Pod, value: str) -> str:
        for inside in ("/mnt/data", "/tmp"):
            if value == inside or value.startswith(inside + "/"):
                return str(pod.root) + value
        return value


async def _kill(pod: _Pod) -> None:
    for process in pod.running():
        process.kill()
        await process.wait()


async def _out(stream: asyncio.StreamReader, channel: int, send: Callable[[int, bytes], None]) -> None:
    with contextlib.suppress(ConnectionError):
        while chunk := await stream.read(65536):
            send(channel, chunk)


async def _stdin(protocol: ServerProtocol, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 process: asyncio.subprocess.Process) -> None:
    """Channel 0 into the process's stdin; the client's close is the stdin's end."""
    assert process.stdin is not None
    with contextlib.suppress(ConnectionError):
        while data := await reader.read(65536):
            protocol.receive_data(data)
            for frame in protocol.events_received():
                if isinstance(frame, Frame) and frame.opcode is Opcode.BINARY and frame.data[:1] == b"\0":
                    process.stdin.write(frame.data[1:])
                    await process.stdin.drain()
            writer.write(b"".join(protocol.data_to_send()))
            if protocol.close_expected():
                writer.close()  # the server ends the TCP connection once the closing handshake is done
                break
    process.stdin.close()
