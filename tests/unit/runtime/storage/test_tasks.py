"""A provider's sweep (`every`): its rounds go on whatever one of them meets; an outage of the
database is the storage layer's to report, any other failure is logged."""

from __future__ import annotations

import asyncio
import logging

import pytest

from runtime.storage import StorageUnavailableError, every


async def test_rounds_go_on_after_an_outage_and_a_failure(caplog: pytest.LogCaptureFixture) -> None:
    rounds: list[int] = []
    failures = [StorageUnavailableError("the database is down"), RuntimeError("a bug")]

    async def work() -> None:
        rounds.append(len(rounds))
        if failures:
            raise failures.pop(0)

    with caplog.at_level(logging.ERROR, logger="stack"):
        task = every(0.01, work, "the sweep of things", at_once=True)
        while len(rounds) < 4:
            await asyncio.sleep(0.005)
        task.cancel()
    assert [record.getMessage() for record in caplog.records] == ["the sweep of things failed; it runs again in 0 s"]


async def test_the_first_round_waits_unless_asked_at_once() -> None:
    rounds: list[str] = []

    async def work() -> None:
        rounds.append("ran")

    waiting, at_once = every(60, work, "a sweep"), every(60, work, "a sweep", at_once=True)
    await asyncio.sleep(0.01)
    waiting.cancel()
    at_once.cancel()
    assert rounds == ["ran"]
