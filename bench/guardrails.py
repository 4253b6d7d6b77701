"""What guardrails and reasoning summaries add to a streamed response, at c=1, in process (the
library client, through the openai SDK): time to the last event of a streamed response whose
answer is about 2,000 characters, with and without the safety provider's input and output
guardrails (moderation by the fake upstream's /v1/moderations on 127.0.0.1: a local guard), and
a reasoning model's response with and without `reasoning.summary` (one more model call).
Requests to the stacks compared alternate, so drift hits both alike.

    .venv/bin/python bench/guardrails.py [--requests 200]
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


def compare(clients: dict[str, Any], requests: dict[str, dict[str, Any]], count: int) -> dict[str, float]:
    samples: dict[str, list[float]] = {name: [] for name in clients}
    for round_ in range(count + 20):
        for name, client in clients.items():
            took = last_event_ms(client, **requests[name])
            if round_ >= 20:  # warm-up
                samples[name].append(took)
    return {name: statistics.median(values) for name, values in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=200)
    options = parser.parse_args()
    from fake_upstream.server import running_fake_upstream

    answer = {"model": "fake-model", "input": f"[answer {json.dumps({'text': ANSWER})}]"}
    reasoner = {"model": "fake-reasoner", "input": "[tokens:50] think"}
    with tempfile.TemporaryDirectory() as tmp, running_fake_upstream() as upstream:
        root = Path(tmp)
        guard = (f'  safety: [{{provider_id: guard, provider_type: openai, config: {{base_url: "{upstream.base_url}", '
                 'check_input: true, check_output: true}}]')
        with LibraryClient(config(root / "plain", upstream.base_url, ""), env={}) as plain, \
                LibraryClient(config(root / "guarded", upstream.base_url, guard), env={}) as guarded:
            clients = {"plain": plain.openai(max_retries=0), "guarded": guarded.openai(max_retries=0)}
            before = len(upstream.bodies("/v1/moderations"))
            medians = compare(clients, {"plain": answer, "guarded": answer}, options.requests)
            checks = (len(upstream.bodies("/v1/moderations")) - before) / (options.requests + 20)
            added = medians["guarded"] - medians["plain"]
            print(f"streamed response of {len(ANSWER)} characters, c=1, time to the last event (median of {options.requests}):")
            print(f"  without guardrails  {medians['plain']:8.2f} ms")
            print(f"  input + output      {medians['guarded']:8.2f} ms   +{added:.2f} ms ({100 * added / medians['plain']:.1f} %), "
                  f"{checks:.1f} moderation calls per response")
            summaries = compare({"plain": clients["plain"], "summary": clients["plain"]},
                                {"plain": reasoner, "summary": {**reasoner, "reasoning": {"summary": "auto"}}}, options.requests)
            added = summaries["summary"] - summaries["plain"]
            print("reasoning model, c=1, time to the last event:")
            print(f"  without a summary   {summaries['plain']:8.2f} ms")
            print(f"  reasoning.summary   {summaries['summary']:8.2f} ms   +{added:.2f} ms (one model call)")


if __name__ == "__main__":
    main()
