"""The integration suite's upstreams: the model replayed from recordings/ (or, when recording, the
fake upstream of tests/fake_upstream started for the session), the MCP servers of tests/fake_mcp
(always live), and the live stack for tests whose timing matters."""

from __future__ import annotations

import os
from collections.abc import Iterator

import openai
import pytest

from fake_mcp.servers import McpServers, running_mcp_servers
from fake_upstream.server import FakeUpstream, running_fake_upstream
from runtime.testing.targets import StackTarget, open_target
from support.live import CONFIG, live_env
from support.sandbox import runtime_python

TEXT_MODEL = os.environ.get("STACK_TEST_TEXT_MODEL", "fake-model")
REASONING_MODEL = os.environ.get("STACK_TEST_REASONING_MODEL", "fake-reasoner")
EMBEDDING_MODEL = os.environ.get("STACK_TEST_EMBEDDING_MODEL", "fake-embed")


@pytest.fixture(scope="session", autouse=True)
def inference_upstream() -> Iterator[str | None]:
    """Starts the fake upstream when recording and no STACK_TEST_INFERENCE_URL names a real one."""
    recording = os.environ.get("STACK_RECORDING_MODE") in ("record", "record-if-missing")
    if not recording or os.environ.get("STACK_TEST_INFERENCE_URL"):
        yield os.environ.get("STACK_TEST_INFERENCE_URL")
        return
    with running_fake_upstream() as upstream, pytest.MonkeyPatch.context() as patch:
        patch.setenv("STACK_TEST_INFERENCE_URL", upstream.base_url)
        yield upstream.base_url


@pytest.fixture(scope="session", autouse=True)
def sandbox_venv() -> None:
    """The runtime venv the stack's bubblewrap sandboxes run code with (run.yaml names it), made once
    per machine before any stack starts: without it the sandboxes provider refuses to start."""
    runtime_python()


@pytest.fixture(scope="session", autouse=True)
def mcp_servers() -> Iterator[McpServers]:
    """The suite's MCP servers (always live: they are ours, on 127.0.0.1); the stack's configured
    MCP server is the open one."""
    with running_mcp_servers() as servers, pytest.MonkeyPatch.context() as patch:
        patch.setenv("STACK_TEST_MCP_URL", servers.open)
        yield servers


@pytest.fixture
def text_model() -> str:
    return TEXT_MODEL


@pytest.fixture
def reasoning_model() -> str:
    return REASONING_MODEL


@pytest.fixture
def embedding_model() -> str:
    return EMBEDDING_MODEL


# The live stack, for tests whose timing matters (background runs, cancels, restarts).
@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeUpstream]:
    with running_fake_upstream() as server:
        yield server


@pytest.fixture(scope="module", params=["server", "library"])
def live(request: pytest.FixtureRequest, upstream: FakeUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[StackTarget]:
    """The integration stack over the live fake upstream, as a server and as a library."""
    env = live_env(upstream, tmp_path_factory.mktemp("live"))
    with open_target(f"{request.param}:{CONFIG}", rootdir=request.config.rootpath, env=env) as target:
        yield target


@pytest.fixture
def client(live: StackTarget) -> Iterator[openai.OpenAI]:
    client = live.openai(max_retries=0)
    yield client
    client.close()
