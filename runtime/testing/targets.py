"""The stacks a test session can run against: a server subprocess, a URL, or the library client."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import httpx2

from runtime.library_client import LibraryClient

if TYPE_CHECKING:
    from anthropic import Anthropic, AsyncAnthropic
    from openai import AsyncOpenAI, OpenAI

__all__ = ["StackTarget", "free_port", "open_target", "running_server"]

STARTUP_TIMEOUT_S = 60.0


@dataclass
class StackTarget:
    """One stack under test and how to reach it."""

    mode: Literal["server", "url", "library"]
    spec: str
    base_url: str
    library: LibraryClient | None = None

    def openai(self, **kwargs: Any) -> OpenAI:
        if self.library is not None:
            return self.library.openai(**kwargs)
        import openai

        kwargs.setdefault("api_key", "none")
        return openai.OpenAI(base_url=self.base_url, **kwargs)

    def async_openai(self, **kwargs: Any) -> AsyncOpenAI:
        if self.library is not None:
            return self.library.async_openai(**kwargs)
        import openai

        kwargs.setdefault("api_key", "none")
        return openai.AsyncOpenAI(base_url=self.base_url, **kwargs)

    def anthropic(self, **kwargs: Any) -> Anthropic:
        """An `anthropic` SDK client of the stack's Messages API."""
        if self.library is not None:
            return self.library.anthropic(**kwargs)
        import anthropic

        kwargs.setdefault("api_key", "none")
        return anthropic.Anthropic(base_url=self.base_url.removesuffix("/v1"), **kwargs)

    def async_anthropic(self, **kwargs: Any) -> AsyncAnthropic:
        if self.library is not None:
            return self.library.async_anthropic(**kwargs)
        import anthropic

        kwargs.setdefault("api_key", "none")
        return anthropic.AsyncAnthropic(base_url=self.base_url.removesuffix("/v1"), **kwargs)


@contextmanager
def open_target(spec: str, rootdir: Path | None = None, env: dict[str, str] | None = None) -> Iterator[StackTarget]:
    """Start (or reach) the stack described by a `--stack-config` value."""
    if spec.startswith(("http://", "https://")):
        base = spec.rstrip("/")
        yield StackTarget("url", spec, base if base.endswith("/v1") else base + "/v1")
    elif spec.startswith("server:"):
        config, port = _split_port(spec.removeprefix("server:"))
        with running_server(_localize(config, rootdir), port, env=env) as base_url:
            yield StackTarget("server", spec, base_url)
    elif spec.startswith("library:"):
        with LibraryClient(_localize(spec.removeprefix("library:"), rootdir), env=env) as library:
            yield StackTarget("library", spec, "http://stack.local/v1", library)
    elif "=" in spec:
        from builder.load import document_from_pairs, parse_config
        from builder.resolve import resolve

        env = dict(os.environ) if env is None else env
        plan = resolve(parse_config(document_from_pairs(spec), env), env)
        with LibraryClient(plan) as library:
            yield StackTarget("library", spec, "http://stack.local/v1", library)
    else:
        raise ValueError(f"--stack-config {spec!r}: expected server:..., library:..., http://host:port or api=provider,...")


def _split_port(text: str) -> tuple[str, int | None]:
    head, _, tail = text.rpartition(":")
    if head and tail.isdigit():
        return head, int(tail)
    return text, None


def _localize(config: str, rootdir: Path | None) -> str:
    """Paths in --stack-config are relative to the pytest rootdir; names are distributions."""
    if rootdir is not None and ("/" in config or config.endswith((".yaml", ".yml"))):
        candidate = rootdir / config
        if candidate.exists():
            return str(candidate)
    return config


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def running_server(config: str, port: int | None = None, env: dict[str, str] | None = None) -> Iterator[str]:
    """`stack run config` as a subprocess, or the server already answering on `port`; yields its /v1 URL."""
    if port is not None and _healthy(f"http://127.0.0.1:{port}/v1"):
        yield f"http://127.0.0.1:{port}/v1"
        return
    port = port or free_port()
    base_url = f"http://127.0.0.1:{port}/v1"
    with tempfile.TemporaryFile() as output:
        process = subprocess.Popen(
            [sys.executable, "-m", "runtime.cli", "run", config, "--port", str(port)],
            stdout=output, stderr=subprocess.STDOUT, env=env,
        )
        try:
            _wait_until_healthy(process, base_url, output)
            yield base_url
        finally:
            _stop(process)


def _healthy(base_url: str) -> bool:
    try:
        return httpx2.get(f"{base_url}/health", timeout=1.0).status_code == 200
    except httpx2.HTTPError:
        return False


def _wait_until_healthy(process: subprocess.Popen[bytes], base_url: str, output: Any) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            output.seek(0)
            tail = output.read().decode(errors="replace")[-4000:]
            raise RuntimeError(f"stack server exited with {process.returncode} before answering:\n{tail}")
        if _healthy(base_url):
            return
        time.sleep(0.05)
    raise RuntimeError(f"stack server did not answer {base_url}/health within {STARTUP_TIMEOUT_S:.0f} s")


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
