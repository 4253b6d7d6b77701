"""Two checkouts of the project side by side in one run: a change measured against its base.

This VM's speed moves by ±25 % between runs and even between minutes, more than most hot-path
changes are worth, so numbers from runs made one after the other rarely settle a question. This
script starts the stack of each checkout (`A` and `B`, e.g. a `git worktree` of the base and the
working tree) at the same time, both on core 0, in front of one fake upstream on core 1, and
measures them in the same minutes: c=1 chat requests (or stored responses) interleaved between the upstream, A and B
(`--rounds` rounds; the client at real-time priority, as in bench/smg.py, unless `--no-prompt-client`),
then c=32 windows that alternate between A and B, with each stack's CPU per
request. Each checkout runs its own code (PYTHONPATH) with this virtual environment's packages.
`--postgres` keeps the stored rows of each in a fresh database of that PostgreSQL server instead of
SQLite (`bench/stack-pg-run.yaml`, this checkout's if the other has none).

    git worktree add /tmp/base HEAD
    .venv/bin/python bench/ab.py /tmp/base . [--stream] [--responses] [--messages A|B|both] [--conversations] [--lookups] [--postgres [ADMIN_DSN]] [--run-yaml PATH] [--windows 6]

A feature's cost, on against off in one checkout: B runs its own run.yaml, and `--bearer` sends the
same `Authorization` header to both stacks (a stack without auth ignores it):

    .venv/bin/python bench/ab.py . . --run-yaml-b bench/chat-auth-run.yaml --bearer bench-api-key-0001
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from collections.abc import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (  # noqa: E402
    CLIENT_CORE, ROOT, STACK, STACK_CORE, UPSTREAM_CORE, Request, cpu_per_request_us, fetch, free_port, get, post,
    measure_throughput, percentile, progress, prompt_client, read_listening_url, sample_interleaved, spawn, stack_env,
    stop, wait_healthy,
)
from chat import EXPECT_CHAT, MESSAGE as CHAT_MESSAGE, MODEL as CHAT_MODEL, chat_request  # noqa: E402
from responses import EXPECT_TEXT, MESSAGE, MODEL, create_response  # noqa: E402
from smg import ADMIN_DSN, CONVERSATION_SIZE, conversation_of, fresh_database, items  # noqa: E402


# A Messages request (Anthropic's) asking what chat_request asks: the same 64-token answer.
MESSAGES_FIRST = re.compile(rb'"text_delta","text":"[^"]')
MESSAGES_DONE = b"event: message_stop"


def messages_request(port: int, stream: bool, headers: dict[str, str] | None) -> Request:
    body: dict[str, object] = {"model": CHAT_MODEL, "max_tokens": 1024, "messages": [{"role": "user", "content": CHAT_MESSAGE}]}
    if stream:
        body["stream"] = True
    return post(port, "/v1/messages", body, EXPECT_CHAT, first=MESSAGES_FIRST, done=MESSAGES_DONE, headers=headers)


async def run(options: argparse.Namespace) -> None:
    headers = {"authorization": f"Bearer {options.bearer}"} if options.bearer else None

    messages_ports: set[int] = set()

    def make(port: int, stream: bool) -> Request:
        if port in messages_ports:
            return messages_request(port, stream, headers)
        return (create_response(port, stream, headers=headers) if options.responses
                else chat_request(port, stream, headers))

    options.messages_ports = messages_ports

    async with contextlib.AsyncExitStack() as databases:
        with tempfile.TemporaryDirectory(prefix="stack-bench-ab-") as temp:
            await measure(options, make, Path(temp), databases)


async def measure(options: argparse.Namespace, make: Callable[[int, bool], Request], logs: Path, databases: contextlib.AsyncExitStack) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "tests"))
    upstream = spawn([sys.executable, "-m", "fake_upstream", "--port", "0"], UPSTREAM_CORE, env, logs / "upstream.log",
                     stdout=subprocess.PIPE)
    stacks: dict[str, tuple[subprocess.Popen[bytes], int]] = {}
    try:
        url = read_listening_url(upstream)
        upstream_port = int(url.rsplit(":", 1)[1])
        for name, checkout in (("A", options.a), ("B", options.b)):
            port = free_port()
            stack = stack_env(url, logs / f"state-{name}") | {"PYTHONPATH": str(checkout.resolve())}
            stored = options.responses or options.conversations or options.lookups
            default = "stack-pg-run.yaml" if options.postgres else "stack-run.yaml" if stored else "chat-run.yaml"
            run_yaml = checkout / ((options.run_yaml_b if name == "B" else None) or options.run_yaml or Path("bench") / default)
            if options.postgres:
                stack["BENCH_POSTGRES_DSN"] = await databases.enter_async_context(fresh_database(options.postgres))
                run_yaml = run_yaml if run_yaml.exists() else ROOT / "bench" / default
            stacks[name] = (spawn([STACK, "run", str(run_yaml), "--port", str(port)], STACK_CORE, stack,
                                  logs / f"{name}.log"), port)
            if options.messages == "both" or options.messages == name:
                options.messages_ports.add(port)
        os.sched_setaffinity(0, {CLIENT_CORE})
        for process, port in stacks.values():
            await wait_healthy(port, "/v1/health", process)
        if options.conversations:
            await compare_conversations({name: port for name, (_, port) in stacks.items()}, options.requests)
            return
        if options.lookups:
            await compare_lookups({name: port for name, (_, port) in stacks.items()}, options.requests)
            return
        progress("c=1, interleaved")
        # The upstream alone is the floor of a chat request; it has no Responses API.
        ports = {**({} if options.responses else {"upstream": upstream_port}), **{name: port for name, (_, port) in stacks.items()}}
        with prompt_client(options.prompt_client):  # see bench/smg.py
            samples = await sample_interleaved({name: (port, make(port, options.stream)) for name, port in ports.items()},
                                               options.requests, 200, rounds=10)
        what = "first content" if options.stream else "total"
        floor = 0.0 if options.responses else percentile(samples["upstream"].firsts if options.stream else samples["upstream"].totals, 0.5)
        print(f"c=1 p50 {what}: upstream {floor:.3f} ms" if floor else f"c=1 p50 {what}:")
        for name in stacks:
            values = samples[name].firsts if options.stream else samples[name].totals
            added = f" (+{percentile(values, 0.5) - floor:.3f})" if floor else ""
            print(f"  {name}: {percentile(values, 0.5):.3f} ms{added}, errors {samples[name].errors}")
        windows: dict[str, list[tuple[float, float]]] = {name: [] for name in stacks}
        for index in range(options.windows):
            progress(f"c=32 window {index + 1} of {options.windows}")
            for name in ("A", "B") if index % 2 == 0 else ("B", "A"):
                process, port = stacks[name]
                measured = await measure_throughput(port, make(port, options.stream), 32, options.duration, 1.0,
                                                    {"stack": process.pid})
                windows[name].append((cpu_per_request_us(measured), measured.rps))
        print(f"c=32, {options.windows} alternating windows of {options.duration:g} s (median; each window):")
        for name, values in windows.items():
            print(f"  {name}: {statistics.median(cpu for cpu, _ in values):.0f} µs of stack CPU a request, "
                  f"{statistics.median(rps for _, rps in values):,.0f}/s; "
                  + " ".join(f"{cpu:.0f}" for cpu, _ in values))
    finally:
        for process, _ in stacks.values():
            stop(process)
        stop(upstream)


async def compare_conversations(ports: dict[str, int], requests: int) -> None:
    """c=1: a one-item append and a list(100), in a conversation of 1,000 items on each stack, interleaved."""
    progress(f"conversations of {CONVERSATION_SIZE:,} items")
    measured: dict[str, tuple[int, Request]] = {}
    for name, port in ports.items():
        conversation_id = await conversation_of(port, CONVERSATION_SIZE)
        measured[f"{name} create"] = (port, post(port, f"/v1/conversations/{conversation_id}/items", {"items": items(0, 1)}, b'"list"'))
        measured[f"{name} list"] = (port, get(port, f"/v1/conversations/{conversation_id}/items?limit=100", b'"list"'))
    progress("c=1, interleaved")
    samples = await sample_interleaved(measured, requests, 200, rounds=10)
    print(f"c=1 p50, conversation of {CONVERSATION_SIZE:,} items:")
    for what in ("create", "list"):
        print(f"  {what}: " + ", ".join(f"{name} {percentile(samples[f'{name} {what}'].totals, 0.5):.3f} ms" for name in ports)
              + f"; errors {sum(samples[f'{name} {what}'].errors for name in ports)}")


async def compare_lookups(ports: dict[str, int], requests: int) -> None:
    """c=1: what reads one stored row by its id (a conversation, a response) and a stored response
    continuing another (`previous_response_id`: the previous one's row is checked on every turn),
    interleaved."""
    measured: dict[str, tuple[int, Request]] = {}
    for name, port in ports.items():
        conversation_id = await conversation_of(port, 20)
        first = (await fetch(port, create_response(port, False, keep=True))).json()["id"]
        measured[f"{name} conversation"] = (port, get(port, f"/v1/conversations/{conversation_id}", b'"conversation"'))
        measured[f"{name} response"] = (port, get(port, f"/v1/responses/{first}", b'"response"'))
        measured[f"{name} continued"] = (port, post(port, "/v1/responses", {"model": MODEL, "input": MESSAGE, "previous_response_id": first},
                                                    EXPECT_TEXT))
    progress("c=1, interleaved")
    with prompt_client():
        samples = await sample_interleaved(measured, requests, 200, rounds=10)
    print("c=1 p50:")
    for what in ("conversation", "response", "continued"):
        print(f"  {what}: " + ", ".join(f"{name} {percentile(samples[f'{name} {what}'].totals, 0.5):.3f} ms" for name in ports)
              + f"; errors {sum(samples[f'{name} {what}'].errors for name in ports)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("a", type=Path, help="checkout A (the base)")
    parser.add_argument("b", type=Path, help="checkout B (the change)")
    parser.add_argument("--stream", action="store_true", help="streamed chat (c=1 measures the first content)")
    parser.add_argument("--responses", action="store_true", help="stored responses instead of chat completions")
    parser.add_argument("--messages", choices=("A", "B", "both"), help="Anthropic Messages requests to that checkout's stack instead of "
                        "chat completions asking the same (`ab.py . . --messages B`: /v1/messages against chat on one checkout)")
    parser.add_argument("--conversations", action="store_true", help="conversation items create and list(100), c=1 only")
    parser.add_argument("--lookups", action="store_true",
                        help="a conversation and a response read by id, a response continuing another: c=1 only")
    parser.add_argument("--run-yaml", type=Path, help="relative to each checkout (bench/chat-run.yaml, or stack-run.yaml with --responses)")
    parser.add_argument("--run-yaml-b", type=Path, help="B's own run.yaml, relative to its checkout (a feature on in B only)")
    parser.add_argument("--bearer", metavar="TOKEN", help="send `Authorization: Bearer TOKEN` with the chat and responses requests")
    parser.add_argument("--postgres", nargs="?", const=ADMIN_DSN, metavar="ADMIN_DSN",
                        help=f"keep the stored rows in PostgreSQL, a fresh database each (default server: {ADMIN_DSN})")
    parser.add_argument("--requests", type=int, default=2_000, help="c=1 requests to each server")
    parser.add_argument("--no-prompt-client", dest="prompt_client", action="store_false",
                        help="time the c=1 requests at the client's normal priority (as before 2026-11-24)")
    parser.add_argument("--windows", type=int, default=6, help="c=32 windows, alternating A and B")
    parser.add_argument("--duration", type=float, default=3.0, help="seconds of each c=32 window")
    import uvloop

    options = parser.parse_args()
    if options.bearer and (options.conversations or options.lookups):
        parser.error("--bearer is for the chat and responses rows; --conversations and --lookups send none")
    uvloop.run(run(options))


if __name__ == "__main__":
    main()
