"""runtime.security.usage: requests, tokens and errors per principal and model, minute by minute, added
up in each process and written to a real database (SQLite and PostgreSQL), where replicas' counts
add up."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from starlette.types import Receive, Scope, Send

from builder.config import PostgresBackend, UsageConfig
from contract.caller import Principal
from runtime.security.quotas import meter_tokens, reset_meter, spend_tokens, token_meter
from runtime.security.usage import OTHER, CountUsage, UsageLedger, note_model
from runtime.storage import Database, Sql, StorageUnavailableError, open_database


def _ledger(db: Database, **config: Any) -> UsageLedger:
    return UsageLedger(db, UsageConfig(**config))


def _now() -> int:
    return int(time.time()) // 60


async def test_two_processes_counts_for_the_same_minute_add_up(database: Database) -> None:
    first, second = _ledger(database), _ledger(database)
    first.add("ann", "m1", 1, 10, 5)
    second.add("ann", "m1", 2, 1, 1, status=500)
    second.add("bob", "m2", 1, 0, 0, status=404)
    await first.flush()
    [ann] = await second.totals(_now() - 5, "model", principal="ann")  # writes its own first
    assert (ann.model, ann.requests, ann.input_tokens, ann.output_tokens, ann.server_errors, ann.client_errors) == ("m1", 3, 11, 6, 1, 0)
    by_who = await first.totals(_now() - 5, "principal")
    assert [(row.principal, row.requests, row.client_errors) for row in by_who] == [("ann", 3, 0), ("bob", 1, 1)]  # most requests first
    await first.aclose()
    await second.aclose()


async def test_minutes_roll_up_into_hours_and_each_is_kept_as_long_as_it_should_be(database: Database) -> None:
    ledger = _ledger(database, retention_days=3)
    now = _now()
    ledger.add("ann", "m", 2, 5, 1)
    by_hour = await ledger.series(now // 60 * 60, 60, "model", ["m"])  # whole hours: read from the hours
    assert [(row.bucket, row.model, row.requests, row.input_tokens) for row in by_hour] == [(now // 60 * 60, "m", 2, 5)]
    insert = "INSERT INTO {} (minute, principal, model, requests, input_tokens, output_tokens, client_errors, server_errors) " \
             "VALUES (:m, 'bob', 'm', 1, 0, 0, 0, 0)"
    for name, minute in (("usage_minutes", now - 3 * 1440), ("usage_minutes", now - 30), ("usage_hours", now // 60 * 60 - 4 * 1440),
                         ("usage_hours", now // 60 * 60 - 1440)):
        await database.write_one(Sql(insert.format(name)), {"m": minute})
    ledger._forgot_at = 0.0  # as an hour after the last time
    await ledger.flush()  # forgets minutes older than two days, hours older than the retention
    minutes = await ledger.series(now - 5 * 1440, 1, "principal", ["bob"], principal="bob")
    hours = await ledger.series(now - 5 * 1440, 60, "principal", ["bob"], principal="bob")
    assert [row.bucket for row in minutes] == [now - 30] and [row.bucket for row in hours] == [now // 60 * 60 - 1440]
    await ledger.aclose()


async def test_a_charts_series_has_the_groups_asked_for_and_the_rest_as_one(database: Database) -> None:
    ledger = _ledger(database)
    for model, requests in (("a", 5), ("b", 2), ("c", 1)):
        ledger.add("ann", model, requests, 0, 0)
    rows = await ledger.series(_now() - 1, 1, "model", ["a"])
    assert sorted((row.model, row.requests) for row in rows) == [("\x00other", 3), ("a", 5)]
    assert {row.model for row in await ledger.series(_now() - 1, 1, "model", [])} == {OTHER}
    with pytest.raises(ValueError):
        await ledger.totals(_now() - 1, "model; DROP TABLE usage_minutes")
    await ledger.aclose()


@pytest.mark.postgres
async def test_counts_a_write_could_not_take_are_kept_for_the_next(database: Database, unused_tcp_port: int) -> None:
    away = open_database(PostgresBackend(type="postgres", dsn=f"postgresql://postgres@127.0.0.1:{unused_tcp_port}/none", connect_timeout_s=1))
    ledger = _ledger(away)
    ledger.add("ann", "m", 1, 7, 3)
    with pytest.raises(StorageUnavailableError):
        await ledger.flush()
    ledger.add("ann", "m", 1, 1, 1)
    ledger.db = database  # the database is back
    rows = await ledger.totals(_now() - 5, "model")
    assert [(row.requests, row.input_tokens, row.output_tokens) for row in rows] == [(2, 8, 4)]
    await ledger.aclose()
    await away.close()


async def _app(scope: Scope, receive: Receive, send: Send) -> None:
    """An API route: asks for a model, spends tokens through the request's meter, answers a status."""
    note_model("m1")
    note_model("m2")  # a second model call of the same request: counted under its first
    await spend_tokens({"prompt_tokens": 10, "completion_tokens": 4, "total_tokens": 14})
    status = int(scope["path"].rsplit("/", 1)[1])
    if status == 500:
        raise RuntimeError("a bug")
    await send({"type": "http.response.start", "status": status, "headers": []})
    await send({"type": "http.response.body", "body": b"{}"})


async def _call(app: CountUsage, path: str, principal: str | None) -> None:
    scope: dict[str, Any] = {"type": "http", "path": path, "method": "POST", "headers": [],
                             "state": {"principal": Principal(principal, {}, "api_key")} if principal else {}}

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b""}

    async def send(message: Any) -> None:
        pass

    await app(scope, receive, send)


async def test_each_api_request_is_counted_with_its_principal_model_tokens_and_status(database: Database) -> None:
    ledger = _ledger(database)
    app = CountUsage(_app, ledger)
    quota: list[dict[str, Any]] = []

    async def quota_meter(usage: Any) -> None:
        quota.append(usage)

    outer = meter_tokens(quota_meter)  # the quota's meter, set by auth outside
    await _call(app, "/v1/chat/200", "ann")
    await _call(app, "/v1/chat/429", "ann")
    with pytest.raises(RuntimeError):
        await _call(app, "/v1/chat/500", None)
    await _call(app, "/console/200", "ann")  # not an API request
    reset_meter(outer)
    assert len(quota) == 4  # the quota still sees every model call's tokens
    [ann] = await ledger.totals(_now() - 1, "model", principal="ann")
    assert (ann.model, ann.requests, ann.input_tokens, ann.output_tokens, ann.client_errors, ann.server_errors) == ("m1", 2, 20, 8, 1, 0)
    [anonymous] = await ledger.totals(_now() - 1, "model", principal="")
    assert (anonymous.model, anonymous.requests, anonymous.server_errors) == ("m1", 1, 1)
    await ledger.aclose()


async def test_tokens_spent_after_the_answer_are_counted_when_spent(database: Database) -> None:
    ledger = _ledger(database)
    kept: list[Any] = []

    async def attach(scope: Scope, receive: Receive, send: Send) -> None:
        note_model("embedder")
        kept.append(token_meter())  # as a vector store keeps it for the file's ingestion
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    await _call(CountUsage(attach, ledger), "/v1/vector_stores/vs/files", "ann")
    await asyncio.sleep(0)
    await kept[0]({"prompt_tokens": 50, "total_tokens": 50})
    rows = await ledger.totals(_now() - 1, "model", principal="ann")
    assert [(row.model, row.requests, row.input_tokens) for row in rows] == [("embedder", 1, 50)]
    await ledger.aclose()
