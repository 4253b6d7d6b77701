"""The server-side tool loop: what a response with an MCP call costs beyond its parts.

Starts the fake upstream (tests/fake_upstream), the test MCP server (tests/fake_mcp, Streamable
HTTP, its tools answering at once) and `stack run bench/mcp-run.yaml`, then measures, with the
raw-asyncio keep-alive client of bench/common.py:

- c=1: a stored response whose model calls one MCP tool (`echo`), beside its parts measured alone:
  the two model calls the stack makes (the call, then the answer with the tool's result) sent to
  the upstream directly, and the tool call sent to the MCP server directly. What the stack adds is
  the response's p50 minus the sum of the parts' p50s;
- c=32: the same responses per second, and the stack's CPU per response;
- two 200 ms tool calls in one model turn: the response's p50 (they run at once: about 200 ms,
  not 400).

    .venv/bin/python bench/mcp.py [--requests 300] [--duration 10] [--concurrency 32] [--json PATH] [--py-spy DIR]

Cores (2-core machine): the stack alone on core 0; the fake upstream, the MCP server and this
load generator on core 1.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from common import (
    CLIENT_CORE,
    STACK_CORE,
    THROUGHPUT_WARMUP_S,
    UPSTREAM_CORE,
    Request,
    Row,
    Samples,
    Servers,
    cpu_per_request_us,
    fetch_all,
    measure_throughput,
    percentile,
    post,
    profiling,
    progress,
    read_listening_url,
    run_with_servers,
    sample_latency,
    spawn,
    stop,
    table,
    verdict,
    wait_healthy,
    write_results,
)

ROOT = Path(__file__).resolve().parent.parent
RUN_YAML = ROOT / "bench" / "mcp-run.yaml"
MODEL = "fake-model"
ECHO_INPUT = '[tool:echo {"text": "bench"}]'
PARALLEL_INPUT = '[tool:sleep {"seconds": 0.2}] [tool:sleep {"seconds": 0.2}]'
EXPECT_ANSWER = b"Tool result: echo: bench"
LATENCY_WARMUP = 30
TARGET_ADDED_P50_MS = 8.0
TARGET_PARALLEL_P50_MS = 260.0  # one 200 ms tool, plus the two model calls and the rest


def mcp_tool(url: str) -> dict[str, Any]:
    return {"type": "mcp", "server_label": "bench", "server_url": url, "require_approval": "never"}


def create_response(port: int, mcp_url: str, text: str, expect: bytes, keep: bool = False) -> Request:
    body = {"model": MODEL, "input": text, "tools": [mcp_tool(mcp_url)]}
    return post(port, "/v1/responses", body, expect, keep=keep)


def upstream_chat(port: int, messages: list[dict[str, Any]], tools: list[dict[str, Any]], expect: bytes) -> Request:
    return post(port, "/v1/chat/completions", {"model": MODEL, "messages": messages, "tools": tools}, expect)


def mcp_call(port: int, name: str, arguments: dict[str, Any], expect: bytes) -> Request:
    """A tools/call as the stack sends it on a modern (2026-07-28) connection: one POST."""
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "stack", "version": "bench"}}
    payload = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                          "params": {"name": name, "arguments": arguments, "_meta": meta}}).encode()
    head = (f"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\ncontent-type: application/json\r\n"
            "accept: application/json, text/event-stream\r\nmcp-protocol-version: 2026-07-28\r\n"
            f"mcp-method: tools/call\r\nmcp-name: {name}\r\ncontent-length: {len(payload)}\r\n\r\n")
    return Request(head.encode() + payload, False, expect)


def summary(samples: Samples) -> dict[str, Any]:
    return {"count": len(samples.totals), "errors": samples.errors,
            "p50_ms": percentile(samples.totals, 0.5), "p99_ms": percentile(samples.totals, 0.99)}


@dataclass
class Options:
    requests: int
    duration: float
    concurrency: int
    json_path: Path | None
    profile_dir: Path | None


async def run_bench(options: Options, servers: Servers, mcp_url: str) -> dict[str, Any]:
    assert servers.stack is not None
    await wait_healthy(servers.stack_port, "/v1/health", servers.stack)
    stack, upstream, c = servers.stack_port, servers.upstream_port, options.concurrency
    mcp_port = int(mcp_url.split(":")[2].split("/")[0])
    results: dict[str, Any] = {}

    # One response, kept, gives the exact tool definitions and messages the stack sends upstream.
    [first] = await fetch_all(stack, [create_response(stack, mcp_url, ECHO_INPUT, EXPECT_ANSWER, keep=True)], 1)
    output = first.json()["output"]
    tools = [{"type": "function", "function": {"name": t["name"], "description": t["description"], "parameters": t["input_schema"]}}
             for t in output[0]["tools"]]
    call = {"id": "call_s1", "type": "function", "function": {"name": "echo", "arguments": output[1]["arguments"]}}
    asking = [{"role": "user", "content": ECHO_INPUT}]
    answering = [*asking, {"role": "assistant", "content": None, "tool_calls": [call]},
                 {"role": "tool", "tool_call_id": "call_s1", "content": "echo: bench"}]

    parts = {
        "model_call": await sample_latency(upstream, upstream_chat(upstream, asking, tools, b"tool_calls"), options.requests, LATENCY_WARMUP),
        "model_answer": await sample_latency(upstream, upstream_chat(upstream, answering, tools, EXPECT_ANSWER), options.requests,
                                             LATENCY_WARMUP),
        "mcp_call": await sample_latency(mcp_port, mcp_call(mcp_port, "echo", {"text": "bench"}, b"echo: bench"), options.requests,
                                         LATENCY_WARMUP),
    }
    progress("parts measured alone")
    whole = await sample_latency(stack, create_response(stack, mcp_url, ECHO_INPUT, EXPECT_ANSWER), options.requests, LATENCY_WARMUP)
    results["c1"] = {"response": summary(whole), **{name: summary(samples) for name, samples in parts.items()}}
    results["c1"]["added_p50_ms"] = percentile(whole.totals, 0.5) - sum(percentile(s.totals, 0.5) for s in parts.values())
    progress("c=1 done")

    with profiling(options.profile_dir, f"mcp_c{c}", servers.stack.pid):
        measured = await measure_throughput(stack, create_response(stack, mcp_url, ECHO_INPUT, EXPECT_ANSWER), c, options.duration,
                                            THROUGHPUT_WARMUP_S, servers.pids)
    results[f"c{c}"] = {**asdict(measured), "stack_cpu_us": cpu_per_request_us(measured)}
    progress(f"c={c} done")

    parallel = await sample_latency(stack, create_response(stack, mcp_url, PARALLEL_INPUT, b"slept 0.2"), 20, 3)
    results["parallel_200ms_x2"] = summary(parallel)
    progress("parallel done")
    return results


def report(options: Options, results: dict[str, Any]) -> str:
    c1, c = results["c1"], options.concurrency
    rows: list[Row] = [("measure", "value", "target")]
    for name in ("response", "model_call", "model_answer", "mcp_call"):
        rows.append((f"c=1 p50, {name.replace('_', ' ')}", f"{c1[name]['p50_ms']:.2f} ms", ""))
    rows.append(("c=1 p50 added by the stack", f"{c1['added_p50_ms']:+.2f} ms",
                 f"< {TARGET_ADDED_P50_MS:.0f} ms {verdict(c1['added_p50_ms'] < TARGET_ADDED_P50_MS)}"))
    through = results[f"c{c}"]
    rows.append((f"c={c} responses/s", f"{through['rps']:.0f} (stack CPU {through['stack_cpu_us']:.0f} us/response)", ""))
    parallel = results["parallel_200ms_x2"]["p50_ms"]
    rows.append(("two 200 ms tools in one turn, p50", f"{parallel:.0f} ms",
                 f"< {TARGET_PARALLEL_P50_MS:.0f} ms {verdict(parallel < TARGET_PARALLEL_P50_MS)}"))
    errors = sum(part.get("errors", 0) for part in c1.values() if isinstance(part, dict)) + through.get("errors", 0)
    rows.append(("errors", str(errors), "0"))
    return table(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--json", type=Path, default=None, dest="json_path")
    parser.add_argument("--py-spy", type=Path, default=None, dest="profile_dir", help="record the stack with py-spy into DIR")
    options = Options(**vars(parser.parse_args()))

    with tempfile.TemporaryDirectory(prefix="stack-bench-mcp-") as temp:
        env = dict(os.environ, PYTHONPATH=str(ROOT / "tests"))
        mcp_server = spawn([sys.executable, "-m", "fake_mcp", "--port", "0"], UPSTREAM_CORE, env, Path(temp) / "mcp.log",
                           stdout=subprocess.PIPE)
        try:
            mcp_url = read_listening_url(mcp_server) + "/mcp"

            async def bench(servers: Servers) -> dict[str, Any]:
                return await run_bench(options, servers, mcp_url)

            run = run_with_servers(RUN_YAML, "mcp", bench)
        finally:
            stop(mcp_server)
    print(f"stack on core {STACK_CORE}; upstream, MCP server and client on core {CLIENT_CORE}; "
          f"load average {run.load[0]:.2f} -> {run.load[1]:.2f}; {run.seconds:.0f} s")
    print(report(options, run.results))
    if options.json_path is not None:
        write_results(options.json_path, options, run)


if __name__ == "__main__":
    main()
