"""Usage over time (run.yaml `server.usage`): each principal's requests, tokens and errors per
model, by the minute for two days, the hour for eight and the day for `retention_days`, kept in the
`metadata` store and drawn by the console's usage page.

Prometheus metrics count since the process started and have no principal label (one series per
caller would not scale in a scraper); this keeps what the console's charts need, per principal,
across restarts and replicas. A request is counted where it is answered (`CountUsage`, inside
auth, so its principal is known): once, under the model it asked for (`note_model`, from the
inference router), with the tokens its model calls report through the request's token meter
(runtime.security.quotas) and, with status 4xx or 5xx, as a client or server error. Tokens a
request's work spends after its answer (a vector store file's embeddings) are added when spent.

Counts are added up in the process and written every `flush_s` as one upsert per row, which adds
to what other replicas wrote for the same minute: the request path only increments integers.
A write that fails keeps its counts for the next one; those of the last `flush_s` are written
when the server stops, and lost only if the process is killed.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from builder.config import UsageConfig
from runtime.security.quotas import meter_tokens, reset_meter, token_meter
from runtime.storage import BIGINT, Column, Database, Index, Sql, String, Table, Unique, in_list, table

__all__ = ["LEVELS", "OTHER", "CountUsage", "UsageLedger", "UsageRow", "note_model", "usage_days", "usage_hours", "usage_minutes"]

log = logging.getLogger("stack")

def _counts_table(name: str) -> Table:
    return table(
        name,
        Column("minute", BIGINT, nullable=False),  # the bucket's first minute: Unix time // 60
        Column("principal", String(160), nullable=False),  # "" with auth off
        Column("model", String(256), nullable=False),  # "" for a request that asked for no model
        Column("requests", BIGINT, nullable=False, default=0),
        Column("input_tokens", BIGINT, nullable=False, default=0),
        Column("output_tokens", BIGINT, nullable=False, default=0),
        Column("client_errors", BIGINT, nullable=False, default=0),
        Column("server_errors", BIGINT, nullable=False, default=0),
        Unique(f"uq_{name}_minute_principal_model", ("minute", "principal", "model")),
        Index(f"ix_{name}_principal_minute", ("principal", "minute")),
    )


@dataclass(frozen=True)
class Level:
    """Counts kept in buckets of `step` minutes for `kept_days` (None: the configured retention)."""

    table: Table
    step: int
    kept_days: int | None
    add: Sql
    forget: Sql


def _level(name: str, step: int, kept_days: int | None) -> Level:
    return Level(_counts_table(name), step, kept_days,
                 Sql(f"INSERT INTO {name} (minute, principal, model, " + ", ".join(_COUNTS) + ") VALUES (:minute, :principal, :model, "
                     + ", ".join(f":{count}" for count in _COUNTS) + ") ON CONFLICT (minute, principal, model) DO UPDATE SET "
                     + ", ".join(f"{count} = {name}.{count} + excluded.{count}" for count in _COUNTS)),
                 Sql(f"DELETE FROM {name} WHERE minute < :before"))


_COUNTS = ("requests", "input_tokens", "output_tokens", "client_errors", "server_errors")
OTHER = "\x00other"  # never a principal's or a model's name: NUL is refused by PostgreSQL's text
"""The group of a chart's bars that stands for every principal or model not drawn on its own."""
# Each count is written at three sizes as it is flushed: a chart adds up a few thousand rows of the
# size its range needs, never a month of a busy server's minutes (millions of rows).
LEVELS = (_level("usage_minutes", 1, 2), _level("usage_hours", 60, 8), _level("usage_days", 1440, None))
usage_minutes, usage_hours, usage_days = (level.table for level in LEVELS)
_FORGET_EVERY_S = 3600.0


@dataclass(frozen=True)
class UsageRow:
    """One bucket's counts for one principal and model."""

    bucket: int  # the bucket's first minute (Unix time // 60)
    principal: str
    model: str
    requests: int
    input_tokens: int
    output_tokens: int
    client_errors: int
    server_errors: int


class UsageLedger:
    """The counts of this process not written yet, and the usage read back for the console."""

    def __init__(self, db: Database, config: UsageConfig) -> None:
        self.db = db
        self.config = config
        self._pending: dict[tuple[int, str, str], list[int]] = {}
        self._flusher: asyncio.Task[None] | None = None
        self._ready = False
        self._forgot_at = 0.0

    def add(self, principal: str, model: str, requests: int, input_tokens: int, output_tokens: int, status: int = 200) -> None:
        key = (int(time.time()) // 60, principal, model)
        counts = self._pending.get(key)
        if counts is None:
            counts = self._pending[key] = [0, 0, 0, 0, 0]
            if self._flusher is None:
                self._flusher = asyncio.get_running_loop().create_task(self._flush_now_and_then())
        counts[0] += requests
        counts[1] += input_tokens
        counts[2] += output_tokens
        if status >= 500:
            counts[4] += 1
        elif status >= 400:
            counts[3] += 1

    async def _flush_now_and_then(self) -> None:
        while True:
            await asyncio.sleep(self.config.flush_s)
            try:
                await self.flush()
            except Exception as error:  # kept for the next round (flush put them back)
                log.warning("usage: the counts could not be written (%s: %s); they are kept and tried again", type(error).__name__, error)

    async def create_tables(self) -> None:
        if not self._ready:
            await self.db.create_tables([level.table for level in LEVELS])
            self._ready = True

    async def flush(self) -> None:
        """Write the counts of this process (added to the rows other processes wrote), and now and
        then forget rows older than the retention."""
        pending, self._pending = self._pending, {}
        if pending:
            rows = [{"minute": minute, "principal": principal, "model": model, **dict(zip(_COUNTS, counts))}
                    for (minute, principal, model), counts in pending.items()]
            sized = [(level.add, _rolled_up(rows, level.step)) for level in LEVELS]

            def add(connection: Any) -> None:
                for statement, level_rows in sized:
                    statement.run(connection, level_rows)

            try:
                await self.create_tables()
                await self.db.write(add)
            except BaseException:
                self._put_back(pending)
                raise
        now = time.time()
        if now - self._forgot_at >= _FORGET_EVERY_S:
            self._forgot_at = now
            await self.create_tables()
            for level in LEVELS:
                await self.db.write_one(level.forget, {"before": int(now) // 60 - self._kept_days(level) * 1440})

    def _put_back(self, pending: dict[tuple[int, str, str], list[int]]) -> None:
        for key, counts in pending.items():
            mine = self._pending.setdefault(key, [0, 0, 0, 0, 0])
            for at, count in enumerate(counts):
                mine[at] += count

    async def aclose(self) -> None:
        """Stop the periodic writes and write what is left."""
        if self._flusher is not None:
            self._flusher.cancel()
            self._flusher = None
        try:
            await self.flush()
        except Exception as error:
            log.warning("usage: the last counts could not be written before the server stopped (%s)", type(error).__name__)

    async def totals(self, since_minute: int, by: str, principal: str | None = None) -> list[UsageRow]:
        """Each principal's or model's (`by`) counts from `since_minute` on (`bucket` is then
        `since_minute`), most requests first; only `principal`'s when given. This process's counts
        are written first, so they show."""
        level = self._level_for(since_minute)
        rows = await self._read(level, "", by, principal, {"since": since_minute}, f"{by} AS grouped", "grouped")
        return sorted(rows, key=lambda row: (-row.requests, -(row.input_tokens + row.output_tokens), getattr(row, by)))

    async def series(self, since_minute: int, bucket_minutes: int, by: str, groups: Sequence[str],
                     principal: str | None = None) -> list[UsageRow]:
        """The counts from `since_minute` on in buckets of `bucket_minutes` (read from the coarsest
        level whose size divides it), of each of `groups` (principals or models, `by`) and of the
        rest together (as OTHER): a chart's bars, a few hundred rows however many callers there are."""
        level = max((level for level in LEVELS if bucket_minutes % level.step == 0), key=lambda level: level.step)
        listed, params = in_list("g", list(groups)) if groups else ("(NULL)", {})
        return await self._read(level, "(minute / :bucket) * :bucket", by, principal,
                                {"since": since_minute, "bucket": bucket_minutes, **params},
                                f"CASE WHEN {by} IN {listed} THEN {by} END AS grouped", "bucket, grouped")

    def _kept_days(self, level: Level) -> int:
        return self.config.retention_days if level.kept_days is None else min(level.kept_days, self.config.retention_days)

    def _level_for(self, since_minute: int) -> Level:
        """The coarsest level whose buckets start at `since_minute` and that still holds it:
        totals add up the fewest rows that are exact."""
        age_days = (int(time.time()) // 60 - since_minute) / 1440
        fits = [level for level in LEVELS if since_minute % level.step == 0 and self._kept_days(level) >= age_days]
        return max(fits, key=lambda level: level.step) if fits else LEVELS[-1]

    async def _read(self, level: Level, bucket: str, by: str, principal: str | None, params: dict[str, Any], grouped: str,
                    group_by: str) -> list[UsageRow]:
        if by not in ("principal", "model"):
            raise ValueError(f"usage is grouped by principal or model, not {by!r}")
        await self.flush()
        await self.create_tables()
        where = "minute >= :since" + (" AND principal = :principal" if principal is not None else "")
        if principal is not None:
            params["principal"] = principal
        statement = Sql(f"SELECT {bucket or 'CAST(:since AS BIGINT)'} AS bucket, {grouped}, " + ", ".join(f"SUM({name})" for name in _COUNTS)
                        + f" FROM {level.table.name} WHERE {where} GROUP BY {group_by}")
        rows = []
        for row in await self.db.read_all(statement, params):
            group = OTHER if row[1] is None else str(row[1])  # NULL: the rest (the series' CASE)
            rows.append(UsageRow(int(row[0]), *((group, "") if by == "principal" else ("", group)), *(int(value) for value in row[2:])))
        return rows


def _rolled_up(rows: list[dict[str, Any]], step: int) -> list[dict[str, Any]]:
    """Minute rows added up in buckets of `step` minutes."""
    if step == 1:
        return rows
    sized: dict[tuple[int, str, str], dict[str, Any]] = {}
    for row in rows:
        key = (row["minute"] // step * step, row["principal"], row["model"])
        found = sized.get(key)
        if found is None:
            sized[key] = {**row, "minute": key[0]}
        else:
            for name in _COUNTS:
                found[name] += row[name]
    return list(sized.values())


# --- counting requests ---------------------------------------------------------------------------

class _Tally:
    """One request's model and tokens, while it is served."""

    __slots__ = ("model", "input", "output", "answered")

    def __init__(self) -> None:
        self.model = ""
        self.input = 0
        self.output = 0
        self.answered = False


_tally: contextvars.ContextVar[_Tally | None] = contextvars.ContextVar("usage_tally", default=None)


def note_model(model: str) -> None:
    """The model the request in hand asked for (its first), for its usage (nothing with usage off)."""
    tally = _tally.get()
    if tally is not None and not tally.model:
        tally.model = model


class CountUsage:
    """Counts each API request (`/v1/...`, HTTP or a WebSocket connection) in the ledger, with the
    principal auth found for it, the model it asked for, its tokens and whether it failed."""

    def __init__(self, app: ASGIApp, ledger: UsageLedger) -> None:
        self.app = app
        self.ledger = ledger

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or not scope["path"].startswith("/v1/"):
            await self.app(scope, receive, send)
            return
        state = scope.get("state")
        found = state.get("principal") if state is not None else None
        principal = found.id if found is not None else ""
        tally, ledger, previous = _Tally(), self.ledger, token_meter()
        status: int | None = None

        async def meter(usage: Mapping[str, Any]) -> None:
            input_tokens, output_tokens = _tokens(usage)
            if tally.answered:  # spent after the answer (an attached file's embeddings)
                ledger.add(principal, tally.model, 0, input_tokens, output_tokens)
            else:
                tally.input += input_tokens
                tally.output += output_tokens
            if previous is not None:
                await previous(usage)

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        metered, counting = meter_tokens(meter), _tally.set(tally)
        try:
            await self.app(scope, receive, send_status if scope["type"] == "http" else send)
        except Exception:
            if status is None:  # the request guard answers it with a 500
                status = 500
            raise
        finally:
            _tally.reset(counting)
            reset_meter(metered)
            tally.answered = True
            ledger.add(principal, tally.model, 1, tally.input, tally.output, status or 200)


def _tokens(usage: Mapping[str, Any]) -> tuple[int, int]:
    """Input and output tokens of a usage object (chat's names, or the Responses API's)."""
    input_tokens = usage.get("prompt_tokens", usage.get("input_tokens"))
    output_tokens = usage.get("completion_tokens", usage.get("output_tokens"))
    return (input_tokens if isinstance(input_tokens, int) else 0), (output_tokens if isinstance(output_tokens, int) else 0)
