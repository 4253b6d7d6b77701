"""Batches and their results, in the configured database (`batches` store).

A batch row keeps the public `Batch` object, its owner (the principal, and its attributes for the
access policies its requests meet), and the lease of the process running it (`owner`,
`heartbeat_at`). Each finished request is a row of `batch_results`, keyed by the batch and the
input line: written once (a second write of a line, by a process that took over after a crash
between a request's end and its record, keeps the first), read back in line order to write the
output and error files.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from contract.caller import Principal
from contract.errors import NotFoundError
from runtime.storage import (
    BOOLEAN, FLOAT, INTEGER, JSON, TEXT, Column, Database, Index, IntegrityError, Scoped, Sql, String, insert_rows, loads,
    owner_condition, table,
)
from runtime.storage.owners import owner_is_gone, process_owner

__all__ = ["OPEN", "BatchStore", "Result"]

OPEN = ("validating", "in_progress", "finalizing", "cancelling")
"""The statuses of a batch some process is (or should be) working on."""
_OPEN_SQL = "status IN ('validating', 'in_progress', 'finalizing', 'cancelling')"

batches = table(
    "batches",
    Column("seq", INTEGER, primary_key=True, serial=True),
    Column("id", String(96), nullable=False, unique=True),
    Column("created_at", FLOAT, nullable=False),
    Column("status", String(32), nullable=False),
    Column("batch", JSON, nullable=False),
    Column("principal", String(160)),
    Column("principal_attributes", JSON),
    Column("owner", String(160)),
    Column("heartbeat_at", FLOAT),
    Index("ix_batches_principal", ("principal", "seq")),
    Index("ix_batches_open", ("heartbeat_at",), where=_OPEN_SQL),
)
results = table(
    "batch_results",
    Column("batch_id", String(96), primary_key=True),
    Column("line", INTEGER, primary_key=True),
    Column("ok", BOOLEAN, nullable=False),
    Column("input_tokens", INTEGER, nullable=False, default=0),
    Column("output_tokens", INTEGER, nullable=False, default=0),
    Column("result", TEXT, nullable=False),
)

_ROW = "id, status, CAST(batch AS TEXT), principal, CAST(principal_attributes AS TEXT), owner, heartbeat_at"
_GET = Scoped(f"SELECT {_ROW} FROM batches WHERE id = :bid{{owner}}", "principal")
_SAVE = Sql("UPDATE batches SET status = :status, batch = :batch WHERE id = :bid", json=["batch"])
_SAVE_IF = Sql("UPDATE batches SET status = :status, batch = :batch WHERE id = :bid AND status = :was", json=["batch"])
_HEARTBEAT = Sql("UPDATE batches SET heartbeat_at = :now, owner = :owner WHERE id = :bid RETURNING status")
_CLAIM = Sql("UPDATE batches SET heartbeat_at = :now, owner = :owner WHERE id = :bid AND (heartbeat_at IS NULL OR heartbeat_at = :seen)")
_LAPSED = Sql(f"SELECT {_ROW} FROM batches WHERE {_OPEN_SQL} AND (heartbeat_at IS NULL OR heartbeat_at < :older_than)")
_OPEN_ROWS = Sql(f"SELECT {_ROW} FROM batches WHERE {_OPEN_SQL}")
_DONE_LINES = Sql("SELECT line FROM batch_results WHERE batch_id = :bid")
_COUNTS = Sql("SELECT ok, COUNT(*), COALESCE(SUM(input_tokens), 0), COALESCE(SUM(output_tokens), 0) FROM batch_results "
              "WHERE batch_id = :bid GROUP BY ok")
_RESULTS = Sql("SELECT line, result FROM batch_results WHERE batch_id = :bid AND ok = :ok AND line > :after ORDER BY line LIMIT :limit")


@dataclass(frozen=True, slots=True)
class Result:
    """One finished request: its line, whether it goes to the output file (else the error file),
    its line of that file, and its tokens."""

    line: int
    ok: bool
    text: str
    input_tokens: int = 0
    output_tokens: int = 0


class StoredBatch:
    def __init__(self, row: tuple[Any, ...]) -> None:
        self.id: str = row[0]
        self.status: str = row[1]
        self.batch: dict[str, Any] = loads(row[2])
        attributes = loads(row[4]) if row[4] is not None else {}
        self.principal = Principal(row[3], attributes) if row[3] is not None else None
        self.owner: str | None = row[5]
        self.heartbeat_at: float | None = row[6]


class BatchStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def create_tables(self) -> None:
        await self.db.create_tables([batches, results])

    async def insert(self, batch: dict[str, Any], principal: Principal | None) -> None:
        row = {"id": batch["id"], "created_at": time.time(), "status": batch["status"], "batch": batch, "owner": process_owner(),
               "heartbeat_at": time.time(), "principal": principal.id if principal is not None else None,
               "principal_attributes": dict(principal.attributes) if principal is not None else None}
        await self.db.write(lambda connection: insert_rows(connection, batches, [row]), small=True)

    async def get(self, batch_id: str, action: str = "read") -> StoredBatch:
        row = await self.db.read_one(*_GET.for_caller({"bid": batch_id}, action))
        if row is None:
            raise NotFoundError(f"No batch found with id '{batch_id}'.", param="batch_id", code="not_found")
        return StoredBatch(row)

    async def get_any(self, batch_id: str) -> StoredBatch | None:
        """The batch whoever owns it (the runner's read, outside any request)."""
        row = await self.db.read_one(Sql(f"SELECT {_ROW} FROM batches WHERE id = :bid"), {"bid": batch_id})
        return StoredBatch(row) if row is not None else None

    async def page(self, after: str | None, limit: int) -> tuple[list[dict[str, Any]], bool]:
        owner, params = owner_condition("principal")
        query = f"SELECT CAST(batch AS TEXT) FROM batches WHERE true{owner}"
        if after is not None:
            query += " AND seq < (SELECT seq FROM batches WHERE id = :after)"
            params["after"] = after
        rows = await self.db.read_all(Sql(query + " ORDER BY seq DESC LIMIT :rows"), {**params, "rows": limit + 1})
        return [loads(text) for text, in rows[:limit]], len(rows) > limit

    async def save(self, batch: dict[str, Any], *, only_if_status: str | None = None) -> bool:
        """Store the batch object as it is now (its status in the row too); with `only_if_status`,
        only if the stored status is that one (whether it was)."""
        params = {"bid": batch["id"], "status": batch["status"], "batch": batch}
        if only_if_status is None:
            return await self.db.write_one(_SAVE, params) > 0
        return await self.db.write_one(_SAVE_IF, {**params, "was": only_if_status}) > 0

    async def heartbeat(self, batch_id: str) -> str | None:
        """Renew this process's lease; the stored status (None: the batch is gone)."""
        params = {"bid": batch_id, "now": time.time(), "owner": process_owner()}
        status = await self.db.write(lambda connection: _HEARTBEAT.run(connection, params).scalar(), small=True, one_statement=True)
        return None if status is None else str(status)

    async def claim(self, batch: StoredBatch) -> bool:
        """Take over a batch whose lease lapsed (or whose process is gone), unless another process did first."""
        params = {"now": time.time(), "owner": process_owner(), "bid": batch.id, "seen": batch.heartbeat_at}
        return await self.db.write_one(_CLAIM, params) > 0

    async def lapsed(self, lease_s: float) -> list[StoredBatch]:
        """Open batches whose lease nobody renewed, and those whose process on this host is gone."""
        rows = await self.db.read_all(_OPEN_ROWS)
        now = time.time()
        found = [StoredBatch(row) for row in rows]
        return [b for b in found if b.heartbeat_at is None or b.heartbeat_at < now - lease_s or owner_is_gone(b.owner)]

    async def done_lines(self, batch_id: str) -> set[int]:
        return {row[0] for row in await self.db.read_all(_DONE_LINES, {"bid": batch_id})}

    async def record(self, batch_id: str, finished: Sequence[Result]) -> None:
        """Record finished requests; a line recorded already keeps its first result."""
        rows = [{"batch_id": batch_id, "line": r.line, "ok": r.ok, "input_tokens": r.input_tokens, "output_tokens": r.output_tokens,
                 "result": r.text} for r in finished]

        def write(connection: Any) -> None:
            insert_rows(connection, results, rows)

        try:
            await self.db.write(write)
        except IntegrityError:  # one of them was recorded already: record them one by one, keeping what is there
            for row in rows:
                try:
                    await self.db.write(lambda connection, row=row: insert_rows(connection, results, [row]), small=True)  # type: ignore[misc]
                except IntegrityError:
                    pass

    async def counts(self, batch_id: str) -> tuple[int, int, int, int]:
        """Completed and failed requests, and their input and output tokens."""
        completed = failed = input_tokens = output_tokens = 0
        for ok, count, tokens_in, tokens_out in await self.db.read_all(_COUNTS, {"bid": batch_id}):
            if ok:
                completed = count
            else:
                failed = count
            input_tokens += int(tokens_in)
            output_tokens += int(tokens_out)
        return completed, failed, input_tokens, output_tokens

    async def results(self, batch_id: str, ok: bool, after: int, limit: int = 500) -> list[tuple[int, str]]:
        """A page of the results of one file, in line order, after line `after`."""
        return [(row[0], row[1]) for row in await self.db.read_all(_RESULTS, {"bid": batch_id, "ok": ok, "after": after, "limit": limit})]

