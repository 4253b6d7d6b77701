"""runtime.observability.worker_metrics (and `merged` of runtime.observability.metrics): the workers of
one server sum their metrics at each scrape, whichever is scraped; a worker that is gone keeps its
counts in the sum (not its gauges), its replacement goes on from them, and one that does not answer
is counted from its file."""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from runtime.observability import worker_metrics
from runtime.observability.metrics import Metrics, merged
from runtime.observability.worker_metrics import WorkerMetrics


class Route:
    path = "/v1/chat/completions"


SCOPE: dict[str, Any] = {"type": "http", "method": "POST", "path": "/v1/chat/completions", "route": Route()}
REQUESTS = ("stack_requests_total", (("method", "POST"), ("route", "/v1/chat/completions"), ("status", "200")))
DURATIONS = ("stack_request_duration_seconds_count", (("method", "POST"), ("route", "/v1/chat/completions")))
SLOW = ("stack_request_duration_seconds_bucket", (("le", "0.5"), ("method", "POST"), ("route", "/v1/chat/completions")))
STREAMS = ("stack_open_streams", ())
TOKENS = ("stack_tokens_total", (("direction", "out"), ("model", "m"), ("provider", "p")))


def parsed(text: bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text.decode()) for sample in family.samples}


def served(metrics: Metrics, requests: int, seconds: float = 0.02, streams: int = 0) -> Metrics:
    for _ in range(requests):
        metrics.request_done(SCOPE, 200, False, seconds)
    for _ in range(streams):
        metrics.stream_started([(b"content-type", b"text/event-stream")])
    return metrics


@pytest.fixture
def directory() -> Iterator[Path]:
    # Short, as the supervisor's: a Unix socket's path has room for about 100 bytes.
    made = Path(tempfile.mkdtemp(prefix="wm-"))
    yield made
    shutil.rmtree(made, ignore_errors=True)


def test_merged_sums_counters_histograms_and_gauges() -> None:
    first, second = served(Metrics(), 3, streams=1), served(Metrics(), 4, seconds=0.3, streams=2)
    second.record_usage("p", "m", {"completion_tokens": 5})
    first.record_usage("p", "m", {"completion_tokens": 2})
    total = parsed(merged([first.snapshot(), second.snapshot()]).exposition())
    assert total[REQUESTS] == 7
    assert total[DURATIONS] == 7
    assert total[SLOW] == 7 and total[("stack_request_duration_seconds_bucket", (("le", "0.1"), *DURATIONS[1]))] == 3
    assert total[("stack_request_duration_seconds_sum", DURATIONS[1])] == pytest.approx(3 * 0.02 + 4 * 0.3)
    assert total[STREAMS] == 3
    assert total[TOKENS] == 7
    # A snapshot is JSON, and a set that has nothing of a metric adds nothing to it.
    again = json.loads(json.dumps(first.snapshot()))
    assert parsed(merged([again, {"counters": {}}]).exposition())[REQUESTS] == 3


async def test_a_scrape_of_any_worker_counts_every_worker_exactly(directory: Path) -> None:
    first, second = served(Metrics(), 3, streams=1), served(Metrics(), 5)
    workers = [WorkerMetrics(first, directory, 0), WorkerMetrics(second, directory, 1)]
    for worker in workers:
        await worker.start()
    try:
        served(second, 2)  # unfolded, and not yet written: the scrape of the other asks for them
        for metrics in (first, second):
            total = parsed(await metrics.scrape())
            assert total[REQUESTS] == 10 and total[STREAMS] == 1
    finally:
        for worker in workers:
            await worker.close()
    assert parsed(first.exposition())[REQUESTS] == 3  # each worker's own metrics are its own still


async def test_a_gone_worker_keeps_its_counts_and_its_replacement_goes_on_from_them(directory: Path) -> None:
    survivor = WorkerMetrics(served(Metrics(), 4), directory, 0)
    dying = WorkerMetrics(served(Metrics(), 6, streams=2), directory, 1)
    await survivor.start()
    await dying.start()
    try:
        assert parsed(await survivor.metrics.scrape())[REQUESTS] == 10
        await dying.close()  # as a worker killed outright, but for its last write: its file stays
        gone = parsed(await survivor.metrics.scrape())
        assert gone[REQUESTS] == 10 and gone[STREAMS] == 0  # its streams are not open any more
        replacement = WorkerMetrics(Metrics(), directory, 1)
        await replacement.start()
        try:
            served(replacement.metrics, 1)
            for scraped in (survivor, replacement):
                assert parsed(await scraped.metrics.scrape())[REQUESTS] == 11
        finally:
            await replacement.close()
    finally:
        await survivor.close()


async def test_a_worker_that_does_not_answer_is_counted_from_its_file(directory: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(worker_metrics, "_ASK_TIMEOUT_S", 0.05)
    (directory / "1.json").write_text(json.dumps(served(Metrics(), 7, streams=1).snapshot()))
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as stuck:  # listens, never answers: an event loop held up
        stuck.bind(str(directory / "1.sock"))
        stuck.listen()
        worker = WorkerMetrics(served(Metrics(), 2), directory, 0)
        await worker.start()
        try:
            total = parsed(await worker.metrics.scrape())
            assert total[REQUESTS] == 9 and total[STREAMS] == 1  # alive: its gauges count
        finally:
            await worker.close()


async def test_a_worker_writes_its_counts_as_they_change(directory: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(worker_metrics, "_WRITE_EVERY_S", 0.01)
    worker = WorkerMetrics(Metrics(), directory, 3)
    await worker.start()
    try:
        served(worker.metrics, 2)
        await asyncio.sleep(0.1)
        written = json.loads((directory / "3.json").read_text())
        assert parsed(merged([written]).exposition())[REQUESTS] == 2
    finally:
        await worker.close()
    assert worker.metrics.gather is None and not (directory / "3.sock").exists()


async def test_a_worker_killed_outright_is_counted_from_its_file_without_its_gauges(directory: Path) -> None:
    (directory / "1.json").write_text(json.dumps(served(Metrics(), 5, streams=2).snapshot()))
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as dead:  # bound, then nobody listens: what a killed worker leaves
        dead.bind(str(directory / "1.sock"))
    worker = WorkerMetrics(served(Metrics(), 1), directory, 0)
    await worker.start()
    try:
        total = parsed(await worker.metrics.scrape())
        assert total[REQUESTS] == 6 and total[STREAMS] == 0
    finally:
        await worker.close()
