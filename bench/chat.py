"""Chat-completions hot path: what the stack adds in front of its upstream.

Starts the fake upstream (tests/fake_upstream) and `stack run bench/chat-run.yaml` in front of it,
drives both with a raw-asyncio HTTP/1.1 keep-alive client, and prints latency at concurrency 1
and throughput at concurrency 32, plain and streamed, the upstream (the floor) beside the stack.

    .venv/bin/python bench/chat.py [--requests 2000] [--duration 10] [--concurrency 32]
                                   [--only plain|stream] [--json PATH] [--check-client]

Cores (2-core machine): the stack server alone on core 0; the fake upstream and this load
generator on core 1. `--check-client` starts no stack: it puts the fake upstream on core 0 and
shows how fast the load generator drives it from core 1 (it should be well above 5,000 req/s).
Targets: plain c=32 >= 2,000 req/s, streamed c=32 >= 500 req/s, added p50 at c=1 < 1 ms.
"""
from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any


from common import (
    run_with_servers,
    CLIENT_CORE,
    STACK_CORE,
    THROUGHPUT_WARMUP_S,
    UPSTREAM_CORE,
    Request,
    Row,
    Servers,
    get,
    measure_latency,
    measure_throughput,
    post,
    progress,
    table,
    verdict,
    wait_healthy,
)

ROOT = Path(__file__).resolve().parent.parent
RUN_YAML = ROOT / "bench" / "chat-run.yaml"
MODEL = "fake-model"
MESSAGE = "[tokens:64] benchmark"
EXPECT_CHAT = b"tok64"  # the last token of the 64-token answer
EXPECT_MODELS = MODEL.encode()

TARGET_PLAIN_RPS = 2_000.0
TARGET_STREAM_RPS = 500.0
TARGET_ADDED_P50_MS = 1.0

LATENCY_WARMUP = 200


def chat_request(port: int, stream: bool, headers: dict[str, str] | None = None) -> Request:
    body: dict[str, Any] = {"model": MODEL, "messages": [{"role": "user", "content": MESSAGE}]}
    if stream:
        body["stream"] = True
    return post(port, "/v1/chat/completions", body, EXPECT_CHAT, headers=headers)


# ---------------------------------------------------------------------------------------------
# The run


@dataclass
class Options:
    requests: int
    duration: float
    concurrency: int
    only: str | None
    json_path: Path | None
    check_client: bool
    run_yaml: Path = RUN_YAML


def kinds(options: Options) -> list[str]:
    return [options.only] if options.only else ["plain", "stream"]


async def run_bench(options: Options, servers: Servers) -> dict[str, Any]:
    """Every measurement, each against the upstream and then through the stack."""
    assert servers.stack is not None
    await wait_healthy(servers.stack_port, "/v1/health", servers.stack)
    ports = {"upstream": servers.upstream_port, "stack": servers.stack_port}
    c = options.concurrency
    results: dict[str, Any] = {}
    for kind in kinds(options):
        stream = kind == "stream"
        results[f"{kind}_c1"] = {
            side: asdict(await measure_latency(port, chat_request(port, stream), options.requests, LATENCY_WARMUP))
            for side, port in ports.items()
        }
        progress(f"{kind} c=1 done")
        results[f"{kind}_c{c}"] = {
            side: asdict(await measure_throughput(port, chat_request(port, stream), c, options.duration,
                                                  THROUGHPUT_WARMUP_S, servers.pids))
            for side, port in ports.items()
        }
        progress(f"{kind} c={c} done")
    models = get(servers.stack_port, "/v1/models", EXPECT_MODELS)
    measured = await measure_throughput(servers.stack_port, models, c, options.duration, THROUGHPUT_WARMUP_S,
                                        servers.pids)
    results[f"models_c{c}"] = {"stack": asdict(measured)}
    return results


async def run_check_client(options: Options, servers: Servers) -> dict[str, Any]:
    """The load generator against the fake upstream alone (on the other core)."""
    port = servers.upstream_port
    results: dict[str, Any] = {}
    for name, request in [("plain", chat_request(port, False)), ("stream", chat_request(port, True)),
                          ("models", get(port, "/v1/models", EXPECT_MODELS))]:
        measured = await measure_throughput(port, request, options.concurrency, options.duration,
                                            THROUGHPUT_WARMUP_S, servers.pids)
        results[f"{name}_c{options.concurrency}"] = {"upstream": asdict(measured)}
    return results


# ---------------------------------------------------------------------------------------------
# Report

def latency_rows(kind: str, pair: dict[str, Any]) -> list[Row]:
    up, st = pair["upstream"], pair["stack"]
    rows: list[Row] = []
    measures = [("p50", "p50_ms"), ("p99", "p99_ms")]
    if kind == "stream":
        measures.append(("p50 first content", "first_p50_ms"))
    for label, key in measures:
        added = st[key] - up[key]
        target = ""
        if key == "p50_ms":
            target = f"added < {TARGET_ADDED_P50_MS:g} ms  {verdict(added < TARGET_ADDED_P50_MS)}"
        rows.append((f"c=1 {kind} {label}", f"{up[key]:.3f} ms", f"{st[key]:.3f} ms", f"{added:+.3f} ms", target))
    if up["errors"] or st["errors"]:
        rows.append((f"c=1 {kind} errors", str(up["errors"]), str(st["errors"]), "", ""))
    return rows


def throughput_cell(measured: dict[str, Any] | None) -> str:
    return "-" if measured is None else f"{measured['rps']:,.0f}/s ({measured['errors']} err)"


def throughput_row(label: str, pair: dict[str, Any], target: float | None) -> Row:
    up, stack = pair.get("upstream"), pair.get("stack")
    mark = ""
    if target is not None and stack is not None:
        mark = f">= {target:,.0f}/s  {verdict(stack['rps'] >= target and stack['errors'] == 0)}"
    ratio = f"x{stack['rps'] / up['rps']:.2f}" if up and stack and up["rps"] else ""
    return (label, throughput_cell(up), throughput_cell(stack), ratio, mark)


def report(results: dict[str, Any], options: Options) -> str:
    c = options.concurrency
    rows: list[Row] = [("measure", "upstream", "stack", "added", "target")]
    targets = {"plain": TARGET_PLAIN_RPS, "stream": TARGET_STREAM_RPS}
    for kind in kinds(options):
        rows += latency_rows(kind, results[f"{kind}_c1"])
        rows.append(throughput_row(f"c={c} {kind} req/s", results[f"{kind}_c{c}"], targets[kind]))
    rows.append(throughput_row(f"c={c} GET /v1/models req/s", results[f"models_c{c}"], None))
    return table(rows)


def cpu_report(results: dict[str, Any], upstream_core: int) -> str:
    """CPU use of each process during each throughput window, to tell which core was the limit."""
    windows = [(f"{name} via {side}", measured) for name, pair in results.items()
               for side, measured in pair.items() if "cpu_percent" in measured]
    with_stack = any("stack" in measured["cpu_percent"] for _, measured in windows)
    head: Row = ("CPU in the throughput windows", f"upstream (core {upstream_core})", f"bench (core {CLIENT_CORE})",
                 "bench us/req")
    rows: list[Row] = [head + (f"stack (core {STACK_CORE})", "stack us/req") if with_stack else head]
    for label, measured in windows:
        cpu = measured["cpu_percent"]
        row: Row = (label, f"{cpu['upstream']:.0f}%", f"{cpu['client']:.0f}%", f"{measured['client_cpu_us']:.0f}")
        if with_stack:
            stack_us = cpu["stack"] / 100 * measured["duration_s"] / max(1, measured["completed"]) * 1e6
            row += (f"{cpu['stack']:.0f}%", f"{stack_us:.0f}" if label.endswith("via stack") else "-")
        rows.append(row)
    return table(rows)


def check_report(results: dict[str, Any]) -> str:
    rows: list[Row] = [("load generator -> fake upstream", "req/s", "errors", "bench us/req")]
    for name, pair in results.items():
        measured = pair["upstream"]
        rows.append((name, f"{measured['rps']:,.0f}", str(measured["errors"]), f"{measured['client_cpu_us']:.0f}"))
    return table(rows)


def header(options: Options) -> str:
    if options.check_client:
        return (f"load generator check: fake upstream on core 0, this client on core {CLIENT_CORE}, "
                f"c={options.concurrency}, {options.duration:g} s window after {THROUGHPUT_WARMUP_S:g} s warm-up")
    return (f"chat completions, model {MODEL}, message {MESSAGE!r} (64-token answer)\n"
            f"stack on core {STACK_CORE}; fake upstream and this load generator on core {UPSTREAM_CORE}\n"
            f"c=1: {options.requests} requests after {LATENCY_WARMUP} warm-up; "
            f"c={options.concurrency}: {options.duration:g} s after {THROUGHPUT_WARMUP_S:g} s warm-up")


def write_json(path: Path, options: Options, results: dict[str, Any], load: tuple[float, float],
               upstream_core: int) -> None:
    document = {
        "options": {key: str(value) if isinstance(value, Path) else value for key, value in asdict(options).items()},
        "cores": {"stack": STACK_CORE, "upstream": upstream_core, "client": CLIENT_CORE},
        "targets": {"plain_rps": TARGET_PLAIN_RPS, "stream_rps": TARGET_STREAM_RPS,
                    "added_p50_ms": TARGET_ADDED_P50_MS},
        "load_average_before_after": load,
        "results": results,
    }
    path.write_text(json.dumps(document, indent=2) + "\n")


# ---------------------------------------------------------------------------------------------
# Entry point


def parse_args() -> Options:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=2_000, help="c=1 requests measured (after 200 warm-up)")
    parser.add_argument("--duration", type=float, default=10.0,
                        help="seconds per throughput window (after 2 s warm-up)")
    parser.add_argument("--concurrency", type=int, default=32, help="connections in the throughput runs")
    parser.add_argument("--only", choices=["plain", "stream"], help="only plain or only streamed chat")
    parser.add_argument("--run-yaml", type=Path, default=RUN_YAML,
                        help="the stack to measure (bench/chat-metrics-run.yaml: the same with Prometheus metrics on)")
    parser.add_argument("--json", type=Path, dest="json_path", help="also write the numbers here")
    parser.add_argument("--check-client", action="store_true",
                        help="only the load generator against the fake upstream, on separate cores")
    args = parser.parse_args()
    return Options(args.requests, args.duration, args.concurrency, args.only, args.json_path, args.check_client, args.run_yaml)


def main() -> None:
    options = parse_args()
    upstream_core = 0 if options.check_client else UPSTREAM_CORE
    runner = run_check_client if options.check_client else run_bench
    run = run_with_servers(None if options.check_client else options.run_yaml, "chat", lambda servers: runner(options, servers), upstream_core)
    results, load = run.results, run.load
    if options.json_path is not None:
        write_json(options.json_path, options, results, load, upstream_core)
    print(header(options))
    print()
    print(check_report(results) if options.check_client else report(results, options))
    print()
    print(cpu_report(results, upstream_core))
    print(f"\nload average (1 min) before/after: {load[0]:.2f}/{load[1]:.2f}; "
          f"took {run.seconds:.0f} s")


if __name__ == "__main__":
    main()
