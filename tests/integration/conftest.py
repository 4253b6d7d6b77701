"""The integration suite's upstream: replayed from recordings/, or, when recording, the fake
upstream of tests/fake_upstream started for the session (a real server on 127.0.0.1)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from fake_mcp.servers import McpServers, running_mcp_servers
from fake_upstream.server import running_fake_upstream

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
