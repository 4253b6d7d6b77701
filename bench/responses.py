"""Responses API hot path: what `POST /v1/responses` adds in front of the upstream's chat completion.

Starts the fake upstream (tests/fake_upstream) and `stack run bench/stack-run.yaml` (the openai
provider in front of it, the built-in responses and conversations providers, SQLite state in a
temporary directory), then measures, with the raw-asyncio keep-alive client of bench/common.py:

- c=1 latency of a stored response (`{"model": "fake-model", "input": "[tokens:64] benchmark"}`),
  plain and streamed (time to the first `response.output_text.delta` event, and to the end), beside
  the same request sent as a chat completion to the upstream directly (the floor);
- c=32 throughput of stored responses, plain and streamed, over a fixed window;
- `GET /v1/responses/{id}`: c=1 latency and c=32 throughput (ids of responses created before);
- a `previous_response_id` chain of 100 turns, repeated: the latency of turns 1, 2, 10, 50 and 100
  beside the upstream's own latency for a chat request carrying the same messages.

    .venv/bin/python bench/responses.py [--requests 1000] [--duration 10] [--concurrency 32]
                                        [--chain-turns 100] [--chain-repeats 7] [--json PATH]
                                        [--py-spy DIR]

Cores (2-core machine): the stack server alone on core 0; the fake upstream and this load
generator on core 1. Targets: >= 800 stored plain and >= 300 streamed responses/s at c=32,
< 2 ms added at p50 (c=1, plain), turn 100 <= 1.3x turn 1 (the upstream's own extra cost for the
longer prompt taken out).
"""

from __future__ import annotations

import argparse
import contextlib
import re
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any


from common import (
    run_with_servers,
    write_results,
    CLIENT_CORE,
    STACK_CORE,
    THROUGHPUT_WARMUP_S,
    UPSTREAM_CORE,
    HttpConnection,
    Reply,
    Request,
    Row,
    Samples,
    Servers,
    Throughput,
    connect,
    cpu_per_request_us,
    fetch_all,
    get,
    measure_throughput,
    percentile,
    post,
    profiling,
    progress,
    sample_latency,
    table,
    verdict,
    wait_healthy,
)

ROOT = Path(__file__).resolve().parent.parent
RUN_YAML = ROOT / "bench" / "stack-run.yaml"
MODEL = "fake-model"
MESSAGE = "[tokens:64] benchmark"
EXPECT_TEXT = b"tok64"  # the last token of the 64-token answer
EXPECT_COMPLETED = b'"status":"completed"'
FIRST_DELTA = re.compile(rb"event: response\.output_text\.delta")
COMPLETED_EVENT = b"event: response.completed"
FIRST_CHAT_CONTENT = re.compile(rb'"content":\s*"[^"]')

TARGET_STORED_RPS = 800.0
TARGET_STREAM_RPS = 300.0
TARGET_ADDED_P50_MS = 2.0
TARGET_CHAIN_RATIO = 1.3
CHAIN_POINTS = (1, 2, 10, 50, 100)  # turn 2: the first that reads a previous response

LATENCY_WARMUP = 100
GET_IDS = 200  # responses created for the GET measurements
FLOOR_REQUESTS = 300  # per chain point, the upstream alone


# ---------------------------------------------------------------------------------------------
# Requests


def create_response(port: int, stream: bool, keep: bool = False, headers: dict[str, str] | None = None) -> Request:
    body: dict[str, Any] = {"model": MODEL, "input": MESSAGE}
    if stream:
        body["stream"] = True
    return post(port, "/v1/responses", body, EXPECT_TEXT, first=FIRST_DELTA, done=COMPLETED_EVENT, keep=keep, headers=headers)


def upstream_chat(port: int, messages: list[dict[str, str]], stream: bool, expect: bytes) -> Request:
    """The chat completion the stack sends upstream for a response with these messages."""
    body: dict[str, Any] = {"model": MODEL, "messages": messages}
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return post(port, "/v1/chat/completions", body, expect, first=FIRST_CHAT_CONTENT)


def chain_turn(port: int, turn: int, previous: str | None) -> Request:
    body: dict[str, Any] = {"model": MODEL, "input": f"turn {turn}"}
    if previous is not None:
        body["previous_response_id"] = previous
    return post(port, "/v1/responses", body, EXPECT_COMPLETED, keep=True)


def chain_messages(turn: int) -> list[dict[str, str]]:
    """What turn `turn` of the chain sends upstream: every earlier turn's input and answer, then its own."""
    messages: list[dict[str, str]] = []
    for earlier in range(1, turn):
        messages.append({"role": "user", "content": f"turn {earlier}"})
        messages.append({"role": "assistant", "content": f"You said: turn {earlier}"})
    messages.append({"role": "user", "content": f"turn {turn}"})
    return messages


# ---------------------------------------------------------------------------------------------
# The run


@dataclass
class Options:
    requests: int
    duration: float
    concurrency: int
    chain_turns: int
    chain_repeats: int
    json_path: Path | None
    profile_dir: Path | None


def summary(samples: Samples) -> dict[str, Any]:
    """p50/p99 of the totals (and of the time to first content, for streams), in ms."""
    result: dict[str, Any] = {
        "count": len(samples.totals), "errors": samples.errors,
        "p50_ms": percentile(samples.totals, 0.5), "p99_ms": percentile(samples.totals, 0.99),
    }
    if samples.firsts:
        result["first_p50_ms"] = percentile(samples.firsts, 0.5)
        result["first_p99_ms"] = percentile(samples.firsts, 0.99)
    return result


def throughput(measured: Throughput) -> dict[str, Any]:
    return {**asdict(measured), "stack_cpu_us": cpu_per_request_us(measured)}


async def run_chain(port: int, turns: int, repeats: int) -> tuple[dict[int, list[float]], int]:
    """`repeats` chains of `turns` turns, each turn continuing the previous one; ms per turn."""
    latencies: dict[int, list[float]] = {turn: [] for turn in range(1, turns + 1)}
    errors = 0
    conn: HttpConnection = await connect(port)
    try:
        for repeat in range(repeats):
            previous: str | None = None
            for turn in range(1, turns + 1):
                try:
                    reply: Reply | None = await conn.exchange(chain_turn(port, turn, previous))
                except OSError:  # reset, or timed out
                    reply = None
                if conn.closing:
                    conn = await connect(port)
                if reply is None or not reply.ok:
                    errors += 1
                    break  # the chain is broken: start the next one
                latencies[turn].append(reply.total_s * 1000)
                previous = reply.json()["id"]
            progress(f"chain {repeat + 1}/{repeats} done")
    finally:
        conn.close()
    return latencies, errors


async def run_bench(options: Options, servers: Servers) -> dict[str, Any]:
    assert servers.stack is not None
    await wait_healthy(servers.stack_port, "/v1/health", servers.stack)
    stack, upstream, c = servers.stack_port, servers.upstream_port, options.concurrency

    def profiled(name: str) -> contextlib.AbstractContextManager[None]:
        return profiling(options.profile_dir, name, servers.stack.pid if servers.stack else None)

    one_message = [{"role": "user", "content": MESSAGE}]
    results: dict[str, Any] = {}

    for kind, stream in (("plain", False), ("stream", True)):
        floor = await sample_latency(upstream, upstream_chat(upstream, one_message, stream, EXPECT_TEXT),
                                     options.requests, LATENCY_WARMUP)
        with profiled(f"{kind}_c1"):
            through = await sample_latency(stack, create_response(stack, stream), options.requests, LATENCY_WARMUP)
        results[f"{kind}_c1"] = {"upstream": summary(floor), "stack": summary(through)}
        progress(f"{kind} c=1 done")
        with profiled(f"{kind}_c{c}"):
            measured = await measure_throughput(stack, create_response(stack, stream), c, options.duration,
                                                THROUGHPUT_WARMUP_S, servers.pids)
        results[f"{kind}_c{c}"] = throughput(measured)
        progress(f"{kind} c={c} done")

    created = await fetch_all(stack, [create_response(stack, False, keep=True)] * GET_IDS, 4)
    ids = [reply.json()["id"] for reply in created if reply.ok]
    gets = [get(stack, f"/v1/responses/{response_id}", response_id.encode()) for response_id in ids]
    with profiled("get_c1"):
        results["get_c1"] = summary(await sample_latency(stack, gets, options.requests, LATENCY_WARMUP))
    with profiled(f"get_c{c}"):
        measured = await measure_throughput(stack, gets, c, options.duration, THROUGHPUT_WARMUP_S, servers.pids)
    results[f"get_c{c}"] = throughput(measured)
    progress("GET done")

    with profiled("chain"):
        latencies, errors = await run_chain(stack, options.chain_turns, options.chain_repeats)
    points = [turn for turn in CHAIN_POINTS if turn <= options.chain_turns]
    chain: dict[str, Any] = {"errors": errors, "repeats": options.chain_repeats, "turns": {}}
    for turn in points:
        expect = f"You said: turn {turn}".encode()
        floor = await sample_latency(upstream, upstream_chat(upstream, chain_messages(turn), False, expect),
                                     FLOOR_REQUESTS, LATENCY_WARMUP)
        chain["turns"][str(turn)] = {
            "messages": 2 * turn - 1,
            "stack_ms": latencies[turn],
            "stack_p50_ms": statistics.median(latencies[turn]) if latencies[turn] else float("nan"),
            "upstream_p50_ms": percentile(floor.totals, 0.5),
            "upstream_errors": floor.errors,
        }
    results["chain"] = chain
    return results


# ---------------------------------------------------------------------------------------------
# Report


def ms(value: float) -> str:
    return f"{value:.2f} ms"


def latency_rows(label: str, pair: dict[str, Any], target: str | None) -> list[Row]:
    up, st = pair["upstream"], pair["stack"]
    keys = [("p50", "p50_ms"), ("p99", "p99_ms")]
    if "first_p50_ms" in st:
        keys = [("first delta p50", "first_p50_ms"), ("first delta p99", "first_p99_ms"),
                ("total p50", "p50_ms"), ("total p99", "p99_ms")]
    rows: list[Row] = []
    for name, key in keys:
        added = st[key] - up[key]
        mark = ""
        if key == "p50_ms" and target is not None:
            mark = f"{target}  {verdict(added < TARGET_ADDED_P50_MS)}"
        rows.append((f"{label} {name}", ms(up[key]), ms(st[key]), f"{added:+.2f} ms", mark))
    if up["errors"] or st["errors"]:
        rows.append((f"{label} errors", str(up["errors"]), str(st["errors"]), "", ""))
    return rows


def throughput_row(label: str, measured: dict[str, Any], target: float | None) -> Row:
    mark = ""
    if target is not None:
        mark = f">= {target:,.0f}/s  {verdict(measured['rps'] >= target and measured['errors'] == 0)}"
    cell = f"{measured['rps']:,.0f}/s ({measured['errors']} err)"
    detail = f"p50 {measured['p50_ms']:.1f} ms, stack CPU {measured['stack_cpu_us'] / 1000:.2f} ms/req"
    return (label, "", cell, detail, mark)


def report(results: dict[str, Any], options: Options) -> str:
    c = options.concurrency
    rows: list[Row] = [("measure", "upstream chat (floor)", "stack", "added", "target")]
    rows += latency_rows("c=1 POST /v1/responses plain", results["plain_c1"], f"added < {TARGET_ADDED_P50_MS:g} ms")
    rows += latency_rows("c=1 POST /v1/responses streamed", results["stream_c1"], None)
    rows.append(throughput_row(f"c={c} stored plain", results[f"plain_c{c}"], TARGET_STORED_RPS))
    rows.append(throughput_row(f"c={c} stored streamed", results[f"stream_c{c}"], TARGET_STREAM_RPS))
    get_c1 = results["get_c1"]
    rows.append(("c=1 GET /v1/responses/{id} p50", "", ms(get_c1["p50_ms"]), "", ""))
    rows.append(("c=1 GET /v1/responses/{id} p99", "", ms(get_c1["p99_ms"]), f"({get_c1['errors']} err)", ""))
    rows.append(throughput_row(f"c={c} GET /v1/responses/{{id}}", results[f"get_c{c}"], None))
    return table(rows)


def chain_report(chain: dict[str, Any]) -> str:
    turns = chain["turns"]
    rows: list[Row] = [("previous_response_id chain", "messages upstream", "upstream p50", "stack p50", "added")]
    for turn, point in turns.items():
        rows.append((f"turn {turn}", str(point["messages"]), ms(point["upstream_p50_ms"]), ms(point["stack_p50_ms"]),
                     f"{point['stack_p50_ms'] - point['upstream_p50_ms']:+.2f} ms"))
    lines = [table(rows)]
    first, last = turns.get("1"), turns.get(str(max(map(int, turns))))
    if first and last and last is not first:
        raw = last["stack_p50_ms"] / first["stack_p50_ms"]
        upstream_extra = last["upstream_p50_ms"] - first["upstream_p50_ms"]
        adjusted = (last["stack_p50_ms"] - upstream_extra) / first["stack_p50_ms"]
        lines.append(f"last turn / turn 1: x{raw:.2f} raw; x{adjusted:.2f} without the upstream's own extra "
                     f"{upstream_extra:+.2f} ms  (target <= x{TARGET_CHAIN_RATIO:g}: "
                     f"{verdict(adjusted <= TARGET_CHAIN_RATIO)})")
        second = turns.get("2")
        if second and last is not second:
            grown = (last["stack_p50_ms"] - upstream_extra) / second["stack_p50_ms"]
            lines.append(f"last turn / turn 2 (both read a previous response): x{grown:.2f} without the upstream's extra")
    lines.append(f"median over {chain['repeats']} chains of each turn; {chain['errors']} broken chains")
    return "\n".join(lines)


def cpu_report(results: dict[str, Any]) -> str:
    rows: list[Row] = [("CPU in the throughput windows", f"stack (core {STACK_CORE})",
                        f"upstream (core {UPSTREAM_CORE})", f"bench (core {CLIENT_CORE})")]
    for name, measured in results.items():
        if isinstance(measured, dict) and "cpu_percent" in measured:
            cpu = measured["cpu_percent"]
            rows.append((name, f"{cpu['stack']:.0f}%", f"{cpu['upstream']:.0f}%", f"{cpu['client']:.0f}%"))
    return table(rows)


def header(options: Options) -> str:
    return (f"responses, model {MODEL}, input {MESSAGE!r} (64-token answer), stored (the default)\n"
            f"stack on core {STACK_CORE}; fake upstream and this load generator on core {UPSTREAM_CORE}\n"
            f"c=1: {options.requests} requests after {LATENCY_WARMUP} warm-up; "
            f"c={options.concurrency}: {options.duration:g} s after {THROUGHPUT_WARMUP_S:g} s warm-up")


# ---------------------------------------------------------------------------------------------
# Entry point


def parse_args() -> Options:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=1_000, help="c=1 requests measured (after 100 warm-up)")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per throughput window (after 2 s warm-up)")
    parser.add_argument("--concurrency", type=int, default=32, help="connections in the throughput runs")
    parser.add_argument("--chain-turns", type=int, default=100, help="turns per previous_response_id chain")
    parser.add_argument("--chain-repeats", type=int, default=7, help="chains; each turn's latency is the median")
    parser.add_argument("--json", type=Path, dest="json_path", help="also write the numbers here")
    parser.add_argument("--py-spy", type=Path, dest="profile_dir", metavar="DIR",
                        help="record the stack server with py-spy during each measurement, into DIR/<name>.txt")
    args = parser.parse_args()
    return Options(args.requests, args.duration, args.concurrency, args.chain_turns, args.chain_repeats, args.json_path,
                   args.profile_dir)


def main() -> None:
    options = parse_args()
    run = run_with_servers(RUN_YAML, "responses", lambda servers: run_bench(options, servers))
    results, load, began = run.results, run.load, time.perf_counter() - run.seconds
    if options.json_path is not None:
        write_results(options.json_path, options, run)
    print(header(options))
    print()
    print(report(results, options))
    print()
    print(chain_report(results["chain"]))
    print()
    print(cpu_report(results))
    print(f"\nload average (1 min) before/after: {load[0]:.2f}/{load[1]:.2f}; "
          f"took {time.perf_counter() - began:.0f} s")


if __name__ == "__main__":
    main()
