"""Claude Code itself against the stack (issue 46, item 3): the npm package, run as
`claude -p ... --output-format json` with `ANTHROPIC_BASE_URL` at a stack server that serves the
Messages API over a scripted chat model (tests/support/scripted_model.py). The task takes Write,
Edit, Bash and Read turns and must leave its files on disk. Installed from the npm registry when
npm is there (a cache under ~/.cache keeps it between runs); skipped, saying why, otherwise."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.live_stack import run_yaml
from support.scripted_model import running_scripted_model
from runtime.testing.targets import running_server

pytestmark = pytest.mark.slow

VERSION = "2.1.197"
"""The Claude Code release the test runs (npm's @anthropic-ai/claude-code)."""


@pytest.fixture(scope="module")
def claude() -> Path:
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip("npm is not installed: Claude Code is an npm package")
    prefix = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "stack-tests" / f"claude-code-{VERSION}"
    binary = prefix / "node_modules" / ".bin" / "claude"
    if not binary.exists():
        done = subprocess.run([npm, "install", "--no-audit", "--no-fund", "--prefix", str(prefix), f"@anthropic-ai/claude-code@{VERSION}"],
                              capture_output=True, text=True, timeout=300, check=False)
        if done.returncode != 0 or not binary.exists():
            pytest.skip(f"npm could not install @anthropic-ai/claude-code@{VERSION}: {done.stderr.strip()[-300:]}")
    return binary


@pytest.fixture
def workdir(tmp_path: Path) -> Iterator[Path]:
    work = tmp_path / "project"
    (work / ".home").mkdir(parents=True)
    yield work


def test_claude_code_writes_edits_runs_and_reads_through_the_stack(claude: Path, workdir: Path) -> None:
    steps = [
        {"name": "Write", "arguments": {"file_path": str(workdir / "hello.py"), "content": "print('hello')\n"}},
        {"name": "Edit", "arguments": {"file_path": str(workdir / "hello.py"), "old_string": "'hello'", "new_string": "'hello, world'"}},
        {"name": "Bash", "arguments": {"command": "python3 hello.py > out.txt", "description": "Run the script"}},
        {"name": "Read", "arguments": {"file_path": str(workdir / "out.txt")}},
    ]
    with running_scripted_model(steps, "The script prints hello, world.") as model:
        config = run_yaml(workdir.parent, model.base_url.removesuffix("/v1"), name="claude-code",
                          providers="  messages: [{provider_id: builtin, provider_type: builtin}]\n")
        with running_server(str(config), env={**os.environ, "STACK_RECORDING_MODE": "live"}) as base_url:
            env = {**os.environ, "HOME": str(workdir / ".home"), "ANTHROPIC_BASE_URL": base_url.removesuffix("/v1"),
                   "ANTHROPIC_AUTH_TOKEN": "none", "ANTHROPIC_MODEL": "scripted", "ANTHROPIC_SMALL_FAST_MODEL": "scripted",
                   "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_TELEMETRY": "1", "DISABLE_AUTOUPDATER": "1"}
            done = subprocess.run([str(claude), "-p", "Write hello.py, make it greet the world, run it and read what it printed.",
                                   "--output-format", "json", "--allowedTools", "Bash Write Edit Read"],
                                  cwd=workdir, env=env, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    result = json.loads(done.stdout)
    assert result["is_error"] is False and result["result"] == "The script prints hello, world." and result["num_turns"] == 5
    assert (workdir / "hello.py").read_text() == "print('hello, world')\n"
    assert (workdir / "out.txt").read_text() == "hello, world\n"
    # Each turn reached the model with Claude Code's tools, and with the results so far.
    turns = [request for request in model.requests if request.get("tools")]
    assert [sum(message["role"] == "tool" for message in turn["messages"]) for turn in turns] == [0, 1, 2, 3, 4]
    assert {"Bash", "Write", "Edit", "Read"} <= {tool["function"]["name"] for tool in turns[0]["tools"]}
    last = turns[-1]["messages"][-1]
    assert last["role"] == "tool" and "hello, world" in last["content"]
