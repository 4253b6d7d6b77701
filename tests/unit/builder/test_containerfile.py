"""The Containerfile `stack build` renders, linted as hadolint would (no container engine runs on
the machines this suite runs on, so the image is never built here): the rules are hadolint's own,
by their codes, checked on the rendered file of every distribution, and on the build context the
file copies from."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest

from builder.render import build
from builder.load import list_distributions

BASE_IMAGE = "python:3.11-slim"


@dataclass(frozen=True)
class Instruction:
    keyword: str
    arguments: str
    line: int


def parse(text: str) -> list[Instruction]:
    """The instructions of a Containerfile: continuation lines joined, comments and blanks left out."""
    instructions: list[Instruction] = []
    pending, start = "", 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if not pending:
            start = number
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        whole = pending + line
        pending = ""
        keyword, _, arguments = whole.partition(" ")
        instructions.append(Instruction(keyword.upper(), arguments.strip(), start))
    return instructions


def lint(text: str, context: Path, port: int) -> list[str]:
    """hadolint's rules that apply to the file `stack build` writes; each problem as `DLxxxx line: why`."""
    problems: list[str] = []
    instructions = parse(text)
    stages: list[str] = []
    final_stage: list[Instruction] = []
    for instruction in instructions:
        keyword, arguments, line = instruction.keyword, instruction.arguments, instruction.line
        if keyword == "FROM":
            image, _, alias = arguments.partition(" AS ")
            if ":" not in image:
                problems.append(f"DL3006 {line}: tag the image explicitly ({image})")
            elif image.endswith(":latest"):
                problems.append(f"DL3007 {line}: pin a version, not latest ({image})")
            stages.append(alias.strip())
            final_stage = []
        final_stage.append(instruction)
        if keyword == "MAINTAINER":
            problems.append(f"DL4000 {line}: MAINTAINER is deprecated")
        if keyword == "WORKDIR" and not arguments.startswith("/"):
            problems.append(f"DL3000 {line}: use an absolute WORKDIR")
        if keyword == "ADD":
            problems.append(f"DL3020 {line}: use COPY instead of ADD for files and folders")
        if keyword in ("CMD", "ENTRYPOINT") and not arguments.startswith("["):
            problems.append(f"DL3025 {line}: use the JSON form of {keyword}")
        if keyword == "COPY":
            problems += _copy_problems(arguments, line, stages, context)
        if keyword == "RUN":
            problems += _run_problems(arguments, line)
    problems += _final_stage_problems(final_stage, port)
    return problems


def _copy_problems(arguments: str, line: int, stages: list[str], context: Path) -> list[str]:
    words = shlex.split(arguments)
    origin = next((word.removeprefix("--from=") for word in words if word.startswith("--from=")), None)
    sources = [word for word in words if not word.startswith("--")][:-1]
    if origin is not None:
        return [] if origin in stages[:-1] else [f"DL3022 {line}: COPY --from names no earlier stage ({origin})"]
    return [f"context {line}: COPY source {source} is not in the build context" for source in sources if not (context / source).exists()]


def _run_problems(command: str, line: int) -> list[str]:
    problems = []
    if re.search(r"(^|[;&|]\s*)cd\s", command):
        problems.append(f"DL3003 {line}: use WORKDIR to switch to a directory")
    if re.search(r"(^|[;&|]\s*)sudo\s", command):
        problems.append(f"DL3004 {line}: do not use sudo")
    if re.search(r"(^|[;&|]\s*)apt\s", command):
        problems.append(f"DL3027 {line}: do not use apt, use apt-get")
    if "apt-get install" in command:
        if not re.search(r"apt-get install[^;&|]*\s-y\b", command):
            problems.append(f"DL3014 {line}: use the -y switch with apt-get install")
        if "--no-install-recommends" not in command:
            problems.append(f"DL3015 {line}: avoid additional packages with --no-install-recommends")
        if "rm -rf /var/lib/apt/lists/*" not in command:
            problems.append(f"DL3009 {line}: delete the apt-get lists after installing")
        if "apt-get update" not in command:
            problems.append(f"DL3009 {line}: apt-get update in the same RUN as apt-get install")
    if re.search(r"\bpip3? (install|wheel)\b", command) and "--no-cache-dir" not in command:
        problems.append(f"DL3042 {line}: use pip with --no-cache-dir")
    if "|" in command.replace("||", "") and "pipefail" not in command:
        problems.append(f"DL4006 {line}: set -o pipefail before a pipe")
    return problems


def _final_stage_problems(stage: list[Instruction], port: int) -> list[str]:
    keywords = [instruction.keyword for instruction in stage]
    problems = []
    users = [instruction.arguments for instruction in stage if instruction.keyword == "USER"]
    if not users or users[-1] in ("root", "0"):
        problems.append("DL3002 last USER should not be root")
    if "HEALTHCHECK" not in keywords:
        problems.append("no HEALTHCHECK in the image")
    if f"EXPOSE {port}" not in [f"EXPOSE {instruction.arguments}" for instruction in stage if instruction.keyword == "EXPOSE"]:
        problems.append(f"the image does not EXPOSE the port the stack serves ({port})")
    if any("build-essential" in instruction.arguments or "gcc" in instruction.arguments.split() for instruction in stage):
        problems.append("a compiler in the image: it belongs in the build stage")
    return problems


def test_the_linter_finds_what_it_looks_for(tmp_path: Path) -> None:
    bad = ("FROM python:latest\nMAINTAINER someone\nWORKDIR app\nADD . /app\nRUN cd /app && apt-get install gcc && pip install x | tee log\n"
           "COPY missing.txt /app/\nCOPY --from=nowhere /a /a\nCMD stack run\n")
    found = {problem.split()[0] for problem in lint(bad, tmp_path, 8321)}
    assert found >= {"DL3007", "DL4000", "DL3000", "DL3020", "DL3003", "DL3014", "DL3015", "DL3009", "DL3042", "DL4006", "DL3022",
                     "DL3025", "DL3002", "context"}, found


@pytest.mark.parametrize("distribution", list_distributions())
@pytest.mark.parametrize("from_checkout", [True, False], ids=["server-from-a-checkout", "server-from-an-index"])
def test_the_containerfile_of_every_distribution_passes_the_linter(distribution: str, from_checkout: bool, tmp_path: Path) -> None:
    out = tmp_path / "out"
    env = {} if from_checkout else {"STACK_BUILD_SERVER_REQUIREMENT": "stack==0.1.0"}
    assert build(distribution, output=out, venv=None, env=env) == 0
    text = (out / "Containerfile").read_text()
    port = 8321
    assert lint(text, out, port) == []
    stages = [instruction.arguments for instruction in parse(text) if instruction.keyword == "FROM"]
    assert stages == [f"{BASE_IMAGE} AS wheels", BASE_IMAGE]  # compiled in a build stage, run on the slim image
    assert ("COPY wheels/ /build/wheels/\n" in text) is from_checkout
