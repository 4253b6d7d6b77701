"""What guardrails and reasoning summaries add to a streamed answer, at c=1, in process (the
library client, through the openai SDK): time to the last event of a streamed response (and of a
streamed chat completion) whose answer is about 2,000 characters, with and without the safety
provider's input and output guardrails (moderation by the fake upstream's /v1/moderations on
127.0.0.1: a local guard), and a reasoning model's response with and without `reasoning.summary`
(one more model call). Requests to the stacks compared alternate, so drift hits both alike.

Twice: with the fake upstream answering at once (the whole answer in a few ms: what the
guardrails cost in absolute terms), and paced like a fast model (`--pace-ms` between tokens,
5 ms = 200 tokens/s): the time to the last token a user waits for, which the issue's target is
a share of.

    .venv/bin/python bench/guardrails.py [--requests 200] [--paced-requests 20] [--pace-ms 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from runtime.library_client import LibraryClient  # noqa: E402

ANSWER = ("The tide comes in twice a day and the harbour fills; the boats rise with it and the keeper notes the hour. " * 19)[:2000]


def config(root: Path, upstream: str, safety: str) -> Path:
    from support.live_stack import run_yaml

    root.mkdir(parents=True, exist_ok=True)
    return run_yaml(root, upstream, safety, name="bench-guardrails")


def last_event_ms(client: Any, **request: Any) -> float:
    start = time.perf_counter()
    for _ in client.responses.create(stream=True, store=False, **request):
        pass
    return (time.perf_counter() - start) * 1000


WARM_UP = 20


def compare(measure: Any, clients: dict[str, Any], requests: dict[str, dict[str, Any]], count: int,
            warm_up: int = WARM_UP) -> dict[str, float]:
    samples: dict[str, list[float]] = {name: [] for name in clients}
    for round_ in range(count + warm_up):
        for name, client in clients.items():
            took = measure(client, **requests[name])
            if round_ >= warm_up:
                samples[name].append(took)
    return {name: statistics.median(values) for name, values in samples.items()}


def last_chunk_ms(client: Any, **request: Any) -> float:
    start = time.perf_counter()
    for _ in client.chat.completions.create(stream=True, **request):
        pass
    return (time.perf_counter() - start) * 1000


def added(medians: dict[str, float], plain: str, guarded: str) -> str:
    extra = medians[guarded] - medians[plain]
    return f"{medians[plain]:8.2f} ms -> {medians[guarded]:8.2f} ms   +{extra:.2f} ms ({100 * extra / medians[plain]:.1f} %)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--paced-requests", type=int, default=20)
    parser.add_argument("--pace-ms", type=int, default=5)
    options = parser.parse_args()
    from fake_upstream.server import running_fake_upstream

    prompt = f"[answer {json.dumps({'text': ANSWER})}]"
    answer = {"model": "fake-model", "input": prompt}
    paced = {"model": "fake-model", "input": f"[slow:{options.pace_ms}] {prompt}"}
    chat = {"model": "fake-model", "messages": [{"role": "user", "content": prompt}]}
    reasoner = {"model": "fake-reasoner", "input": "[tokens:50] think"}
    with tempfile.TemporaryDirectory() as tmp, running_fake_upstream() as upstream:
        root = Path(tmp)
        guard = (f'  safety: [{{provider_id: guard, provider_type: openai, config: {{base_url: "{upstream.base_url}", '
                 'check_input: true, check_output: true}}]')
        with LibraryClient(config(root / "plain", upstream.base_url, ""), env={}) as plain, \
                LibraryClient(config(root / "guarded", upstream.base_url, guard), env={}) as guarded:
            clients = {"plain": plain.openai(max_retries=0), "guarded": guarded.openai(max_retries=0)}
            before = len(upstream.bodies("/v1/moderations"))
            medians = compare(last_event_ms, clients, {"plain": answer, "guarded": answer}, options.requests)
            checks = (len(upstream.bodies("/v1/moderations")) - before) / (options.requests + WARM_UP)
            print(f"{len(ANSWER)} characters streamed at c=1, time to the last event, without -> with input + output guardrails:")
            print(f"  response, instant upstream          {added(medians, 'plain', 'guarded')}, {checks:.1f} moderation calls each")
            medians = compare(last_chunk_ms, clients, {"plain": chat, "guarded": chat}, options.requests)
            print(f"  chat completion, instant upstream   {added(medians, 'plain', 'guarded')}")
            medians = compare(last_event_ms, clients, {"plain": paced, "guarded": paced}, options.paced_requests, warm_up=2)
            print(f"  response, {1000 // options.pace_ms} tokens/s upstream      {added(medians, 'plain', 'guarded')}")
            summaries = compare(last_event_ms, {"plain": clients["plain"], "summary": clients["plain"]},
                                {"plain": reasoner, "summary": {**reasoner, "reasoning": {"summary": "auto"}}}, options.requests)
            print("reasoning model, c=1, time to the last event, without -> with reasoning.summary (one model call):")
            print(f"  {added(summaries, 'plain', 'summary')}")


if __name__ == "__main__":
    main()
