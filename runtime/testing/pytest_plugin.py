"""Pytest fixtures for testing a stack through the `openai` SDK, in server and library modes.

Installed as the `stack` pytest plugin, so a third-party provider package tests itself the same
way. Choose the stack with `--stack-config` (repeatable):

    server:<distribution|path>[:port]   start `stack run` as a subprocess (or reuse one on that port)
    http://host:port                    a server that is already running
    library:<distribution|path>         the app in-process, through the library client
    api=provider,api=provider           an in-process stack of those providers' sample configs

Without it, the `stack_targets` ini option (space-separated) is used; it defaults to the server
and library modes of the `stack_default_config` ini option (default: the starter distribution).
Tests ask for `openai_client` or `async_openai_client`; each runs once per target.

Upstream traffic is replayed from recordings by default; `--inference-mode` (record,
record-if-missing, live) changes that for the session.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING

import pytest

from runtime.testing.targets import StackTarget, open_target

if TYPE_CHECKING:
    import openai

__all__ = ["async_openai_client", "openai_client", "stack_target"]


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("stack", "stack under test")
    group.addoption(
        "--stack-config",
        action="append",
        default=None,
        metavar="SPEC",
        help="server:<dist|path>[:port], http://host:port, library:<dist|path>, or api=provider,... (repeatable)",
    )
    group.addoption(
        "--inference-mode",
        choices=["replay", "record", "record-if-missing", "live"],
        default=None,
        help="how upstream HTTP exchanges are handled (sets STACK_RECORDING_MODE; default: replay)",
    )
    parser.addini("stack_targets", "default --stack-config values, space-separated", default="")
    parser.addini("stack_default_config", "the config tests run against by default", default="starter")


def _target_specs(config: pytest.Config) -> list[str]:
    given: list[str] | None = config.getoption("stack_config")
    if given:
        return given
    configured = str(config.getini("stack_targets")).split()
    if configured:
        return configured
    default = str(config.getini("stack_default_config"))
    return [f"server:{default}", f"library:{default}"]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "stack_target" in metafunc.fixturenames:
        specs = _target_specs(metafunc.config)
        ids = [spec.split(":", 1)[0] if spec.startswith(("server:", "library:")) else spec for spec in specs]
        metafunc.parametrize("stack_target", specs, indirect=True, scope="session", ids=ids)


def pytest_configure(config: pytest.Config) -> None:
    # Set before any stack starts, so server subprocesses inherit it too.
    mode = config.getoption("inference_mode") or os.environ.get("STACK_RECORDING_MODE") or "replay"
    os.environ["STACK_RECORDING_MODE"] = mode


@pytest.fixture(scope="session")
def stack_state_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A fresh STACK_STATE_DIR for the session, unless the environment sets one."""
    if os.environ.get("STACK_STATE_DIR"):
        yield os.environ["STACK_STATE_DIR"]
        return
    path = str(tmp_path_factory.mktemp("stack-state"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("STACK_STATE_DIR", path)
        yield path


@pytest.fixture(scope="session")
def stack_target(
    request: pytest.FixtureRequest, stack_state_dir: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[StackTarget]:
    """The stack under test, started once per session for each `--stack-config`, each with a
    state directory of its own."""
    env = dict(os.environ, STACK_STATE_DIR=str(tmp_path_factory.mktemp("target-state")))
    with open_target(str(request.param), rootdir=request.config.rootpath, env=env) as target:
        yield target


@pytest.fixture
def openai_client(stack_target: StackTarget) -> Iterator[openai.OpenAI]:
    """An `openai.OpenAI` client of the stack under test."""
    client = stack_target.openai(max_retries=0)
    yield client
    client.close()


@pytest.fixture
async def async_openai_client(stack_target: StackTarget) -> AsyncIterator[openai.AsyncOpenAI]:
    """An `openai.AsyncOpenAI` client of the stack under test."""
    client = stack_target.async_openai(max_retries=0)
    yield client
    await client.close()
