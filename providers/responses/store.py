"""Stored responses, their input and output items, and the event log of background responses.

A response row keeps `ancestors`, the ids of every response before it in its previous_response_id
chain (root first), so the context of a new turn is read in two queries whatever the chain's
length: the previous response's row, then the items of all its ancestors and itself.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from typing import Any

import sqlalchemy as sa

from runtime.auth import principal_id
from runtime.errors import NotFoundError
from runtime.owners import owner_is_gone, process_owner
from runtime.storage import (
    PARTIAL_INDEX_WHERE, SMALL_WRITE_ROWS, Database, InsertRows, Prepared, StorageUnavailableError, caller_may, for_caller, insert_into,
    json_type, rows_of_json,
)

__all__ = ["ResponseStore", "StoredResponse"]

_OPEN_SQL = "status IN ('queued', 'in_progress')"  # literal, so the planner matches it to the partial index

_metadata = sa.MetaData()
responses = sa.Table(
    "responses",
    _metadata,
    sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("id", sa.String(96), nullable=False, unique=True),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("status", sa.String(32), nullable=False),
    sa.Column("background", sa.Boolean, nullable=False, default=False),
    sa.Column("ancestors", json_type(), nullable=False),
    sa.Column("conversation_id", sa.String(96), nullable=True, index=True),
    sa.Column("response", json_type(), nullable=False),
    sa.Column("request", json_type(), nullable=True),
    sa.Column("heartbeat_at", sa.Float, nullable=True),
    # The process producing it (runtime.owners): a restart on its host takes it over at once.
    sa.Column("owner", sa.String(160), nullable=True),
    # Who made it (runtime.auth): with auth on, only they reach it. Null when auth was off.
    sa.Column("principal", sa.String(160), nullable=True),
    sa.Index("ix_responses_principal", "principal", "seq"),
    # Only the responses still being produced: the sweep for orphans reads this, never the table.
    sa.Index("ix_responses_open", "heartbeat_at", info={PARTIAL_INDEX_WHERE: _OPEN_SQL}),
)
items = sa.Table(
    "response_items",
    _metadata,
    sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("response_id", sa.String(96), nullable=False),
    sa.Column("kind", sa.String(8), nullable=False),  # input | output
    sa.Column("position", sa.Integer, nullable=False),
    sa.Column("item_id", sa.String(128), nullable=True, index=True),
    sa.Column("item", json_type(), nullable=False),
    sa.Index("ix_response_items_response", "response_id", "kind", "position"),
)
events = sa.Table(
    "response_events",
    _metadata,
    sa.Column("response_id", sa.String(96), primary_key=True),
    sa.Column("sequence_number", sa.Integer, primary_key=True),
    sa.Column("event", json_type(), nullable=False),
)


CANCELS = "stack_response_cancel"
"""The channel on which a cancel is announced to the process running the response."""
EVENTS = "stack_response_events"
"""The channel on which a background response's new logged events are announced to followers."""

# The hot statements, built once: SQLAlchemy caches a statement's compiled form by a key it
# computes by walking the statement, and a statement built per call is walked per call (about
# 60 us for an UPDATE ... WHERE here, five times the cost of executing it).
_GET = sa.select(responses).where(responses.c.id == sa.bindparam("rid"))
_GET_OWNED = _GET.where(responses.c.principal == sa.bindparam("principal"))
_EXISTS = sa.select(responses.c.id).where(responses.c.id == sa.bindparam("rid"))
_EXISTS_OWNED = _EXISTS.where(responses.c.principal == sa.bindparam("principal"))


def _finish_update(*status: sa.ColumnElement[bool]) -> sa.Update:
    """The final state of response `:rid`, if its stored status meets `status`."""
    return responses.update().where(responses.c.id == sa.bindparam("rid"), *status).values(
        status=sa.bindparam("new_status"), response=sa.bindparam("new_response"))


# The conditions on the stored status a statement is built with, by `_if_status`'s names.
_IF_STATUS: dict[str, tuple[sa.ColumnElement[bool], ...]] = {
    "any": (),
    "was": (responses.c.status == sa.bindparam("status_was"),),
    "one_of": (responses.c.status.in_(sa.bindparam("statuses", expanding=True)),),
}


def _if_status(only_if_status: Sequence[str], params: dict[str, Any]) -> str:
    """Which of `_IF_STATUS` checks that the stored status is one of `only_if_status` (any if
    empty), with its parameter added to `params`. One status, the usual case, is a plain equality:
    no IN list to expand at each run."""
    if not only_if_status:
        return "any"
    if len(only_if_status) == 1:
        params["status_was"] = only_if_status[0]
        return "was"
    params["statuses"] = list(only_if_status)
    return "one_of"


_FINISH = {name: Prepared(_finish_update(*status)) for name, status in _IF_STATUS.items()}
_DROP_OUTPUT = Prepared(items.delete().where(items.c.response_id == sa.bindparam("rid"), items.c.kind == "output"))
_ITEM_COLUMNS = ("response_id", "kind", "position", "item_id", "item")


def _finish_in_one(*status: sa.ColumnElement[bool]) -> sa.Select[Any]:
    """PostgreSQL: `finish` as one statement. The update (if the stored status meets `status`), the
    old output's delete and the new output's insert (`:rows`, as JSON) are data-modifying WITHs
    gated on the update; it selects how many rows the update matched. All three read the same
    snapshot, so the delete does not see the rows inserted beside it."""
    done = _finish_update(*status).returning(responses.c.id).cte("done")
    dropped = items.delete().where(items.c.response_id.in_(sa.select(done.c.id)), items.c.kind == "output").cte("dropped")
    records, values = rows_of_json(items, _ITEM_COLUMNS, "rows")
    added = items.insert().from_select(list(_ITEM_COLUMNS), sa.select(*values).select_from(done).join(records, sa.true())).cte("added")
    return sa.select(sa.func.count()).select_from(done).add_cte(dropped, added)


_FINISH_IN_ONE = {name: Prepared(_finish_in_one(*status)) for name, status in _IF_STATUS.items()}
# A background response's new state and the caller's lease on it, always conditioned on its status.
_SET_STATUS = {name: Prepared(_finish_update(*status).values(heartbeat_at=sa.bindparam("now"), owner=sa.bindparam("owner")))
               for name, status in _IF_STATUS.items() if status}
_HEARTBEAT = Prepared(responses.update().where(responses.c.id == sa.bindparam("rid")).values(
    heartbeat_at=sa.bindparam("now"), owner=sa.bindparam("owner")).returning(responses.c.status))
_RENEW = responses.update().where(responses.c.id.in_(sa.bindparam("ids", expanding=True)), sa.text(_OPEN_SQL)).values(
    heartbeat_at=sa.bindparam("now"), owner=sa.bindparam("owner"))
_CHAIN_ITEMS = sa.select(items.c.response_id, items.c.kind, items.c.position, items.c.item).where(
    items.c.response_id.in_(sa.bindparam("chain", expanding=True)))


def _for_caller(plain: sa.Select[Any], owned: sa.Select[Any], response_id: str, action: str) -> tuple[sa.Select[Any], dict[str, Any]]:
    """The statement (and parameters) that finds response `response_id` if the caller may `action` it."""
    return for_caller(plain, owned, responses.c.principal, {"rid": response_id}, action, bind="principal")


class StoredResponse:
    """A response row: the public object plus what the engine needs to continue from it."""

    def __init__(self, row: sa.RowMapping) -> None:
        self.id: str = row["id"]
        self.status: str = row["status"]
        self.background: bool = bool(row["background"])
        self.ancestors: list[str] = list(row["ancestors"])
        self.response: dict[str, Any] = row["response"]
        self.request: dict[str, Any] | None = row["request"]
        self.heartbeat_at: float | None = row["heartbeat_at"]


class ResponseStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def create_tables(self) -> None:
        await self.db.create_tables(_metadata)

    async def insert(
        self,
        response: dict[str, Any],
        *,
        ancestors: Sequence[str],
        input_items: Sequence[dict[str, Any]],
        output_items: Sequence[dict[str, Any]] = (),
        request: dict[str, Any] | None = None,
    ) -> None:
        """Write a new response with its items in one transaction."""
        row = {
            "id": response["id"], "created_at": response["created_at"], "status": response["status"],
            "background": bool(response.get("background")), "ancestors": list(ancestors),
            "conversation_id": (response.get("conversation") or {}).get("id"), "response": response, "request": request,
            "heartbeat_at": time.time(), "owner": process_owner(), "principal": principal_id(),
        }
        item_rows = _item_rows(response["id"], "input", input_items) + _item_rows(response["id"], "output", output_items)
        await self.db.write(InsertRows((responses, [row]), (items, item_rows)), small=len(item_rows) <= SMALL_WRITE_ROWS)

    async def finish(self, response: dict[str, Any], output_items: Sequence[dict[str, Any]], *, only_if_status: Sequence[str] = ()) -> bool:
        """Record the final state and output of a response; with `only_if_status`, only if the
        stored status is one of those (so a cancel that won the race is not overwritten)."""
        params: dict[str, Any] = {"rid": response["id"], "new_status": response["status"], "new_response": response}
        condition = _if_status(only_if_status, params)
        rows = _item_rows(response["id"], "output", output_items)
        if self.db.dialect == "postgresql":  # one round trip where a transaction of three statements takes five
            finish = _FINISH_IN_ONE[condition]
            return await self.db.write(lambda connection: bool(finish.run(connection, {**params, "rows": rows}).scalar()), one_statement=True)

        update = _FINISH[condition]

        def work(connection: sa.Connection) -> bool:
            if not update.run(connection, params).rowcount:
                return False
            _DROP_OUTPUT.run(connection, {"rid": response["id"]})
            if rows:
                insert_into(items).run(connection, rows)
            return True

        return await self.db.write(work, small=len(rows) <= SMALL_WRITE_ROWS)

    async def get(self, response_id: str, action: str = "read") -> StoredResponse:
        """The response, if the caller may `action` it (any, with auth off): else a 404, as if absent."""
        row = await self.db.fetch_one(*_for_caller(_GET, _GET_OWNED, response_id, action))
        if row is None:
            raise NotFoundError(f"Response with id '{response_id}' not found.", param="response_id", code="not_found")
        return StoredResponse(row)

    async def readable(self, response_id: str) -> bool:
        """Whether the response is stored and the caller may read it: one indexed row, for a
        cache to trust its copy (another replica may have deleted it)."""
        return await self.db.fetch_one(*_for_caller(_EXISTS, _EXISTS_OWNED, response_id, "read")) is not None

    async def context(self, response_id: str) -> tuple[StoredResponse, list[dict[str, Any]]]:
        """The response and every item of its chain (its ancestors' and its own), in order."""
        previous = await self.get(response_id)
        chain = [*previous.ancestors, previous.id]
        rows = await self.db.fetch_all(_CHAIN_ITEMS, {"chain": chain})
        order = {rid: index for index, rid in enumerate(chain)}
        rows.sort(key=lambda row: (order[row["response_id"]], row["kind"] != "input", row["position"]))
        return previous, [row["item"] for row in rows]

    async def items_of(self, response_id: str, kind: str) -> list[dict[str, Any]]:
        rows = await self.db.fetch_all(
            sa.select(items.c.item).where(items.c.response_id == response_id, items.c.kind == kind).order_by(items.c.position)
        )
        return [row["item"] for row in rows]

    async def items_by_id(self, item_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        if not item_ids:
            return {}
        query = sa.select(items.c.item_id, items.c.item).where(items.c.item_id.in_(list(item_ids)))
        if principal_id() is not None:  # another owner's items are not there to reference
            query = query.join(responses, responses.c.id == items.c.response_id).where(caller_may("read", responses.c.principal))
        rows = await self.db.fetch_all(query)
        return {row["item_id"]: row["item"] for row in rows}

    async def page(self, *, after: str | None, limit: int, order: str) -> tuple[list[dict[str, Any]], bool]:
        query = sa.select(responses.c.response)
        if principal_id() is not None:
            query = query.where(caller_may("read", responses.c.principal))
        if after is not None:
            anchor = sa.select(responses.c.seq).where(responses.c.id == after).scalar_subquery()
            query = query.where(responses.c.seq > anchor if order == "asc" else responses.c.seq < anchor)
        query = query.order_by(responses.c.seq.asc() if order == "asc" else responses.c.seq.desc()).limit(limit + 1)
        rows = await self.db.fetch_all(query)
        return [row["response"] for row in rows[:limit]], len(rows) > limit

    async def input_items(self, response_id: str, *, after: str | None, limit: int, order: str) -> tuple[list[dict[str, Any]], bool]:
        await self.get(response_id)
        query = sa.select(items.c.item).where(items.c.response_id == response_id, items.c.kind == "input")
        if after is not None:
            anchor = sa.select(items.c.position).where(
                items.c.response_id == response_id, items.c.kind == "input", items.c.item_id == after
            ).scalar_subquery()
            query = query.where(items.c.position > anchor if order == "asc" else items.c.position < anchor)
        query = query.order_by(items.c.position.asc() if order == "asc" else items.c.position.desc()).limit(limit + 1)
        rows = await self.db.fetch_all(query)
        return [row["item"] for row in rows[:limit]], len(rows) > limit

    async def delete(self, response_id: str) -> None:
        await self.get(response_id, "delete")
        await self.discard(response_id)

    async def discard(self, response_id: str) -> None:
        """Remove a response with its items and events, whoever may delete it: for one its client
        never saw (its request was refused before any output)."""

        def work(connection: sa.Connection) -> None:
            connection.execute(items.delete().where(items.c.response_id == response_id))
            connection.execute(events.delete().where(events.c.response_id == response_id))
            connection.execute(responses.delete().where(responses.c.id == response_id))

        await self.db.write(work)

    # --- background responses ------------------------------------------------------------------

    async def on_cancel(self, callback: Callable[[str], None]) -> None:
        """Call `callback(response_id)` when any process cancels a response (runtime.storage
        `subscribe`: every replica on PostgreSQL, this process on SQLite)."""
        await self.db.subscribe(CANCELS, callback)

    async def announce_cancel(self, response_id: str) -> None:
        await self.db.notify(CANCELS, response_id)

    async def set_status(self, response_id: str, status: str, response: dict[str, Any], *, only_if_status: Sequence[str]) -> bool:
        """Set a background response's status and state if its stored status is one of
        `only_if_status` (whether it was), taking its lease for this process."""
        if not only_if_status:
            raise ValueError("set_status needs the statuses it may change")
        params: dict[str, Any] = {"rid": response_id, "new_status": status, "new_response": response, "now": time.time(),
                                  "owner": process_owner()}
        update = _SET_STATUS[_if_status(only_if_status, params)]
        changed = await self.db.write(lambda connection: update.run(connection, params).rowcount, small=True, one_statement=True)
        return changed > 0

    async def heartbeat(self, response_id: str) -> str | None:
        """Refresh the lease of a running background response; returns its stored status (None if it is gone)."""
        params = {"rid": response_id, "now": time.time(), "owner": process_owner()}
        status = await self.db.write(lambda connection: _HEARTBEAT.run(connection, params).scalar(), small=True, one_statement=True)
        return None if status is None else str(status)

    async def renew_leases(self, response_ids: Sequence[str]) -> None:
        """Refresh the lease of responses this process is streaming."""
        await self.db.execute(_RENEW, {"now": time.time(), "ids": list(response_ids), "owner": process_owner()})

    async def orphaned(self, older_than: float, *, owners_checked: bool = False) -> list[StoredResponse]:
        """Responses still queued or being produced whose lease nobody renewed; with
        `owners_checked`, also those whose lease runs yet but whose process is gone (a crash on
        this host: see runtime.owners)."""
        lapsed = sa.or_(responses.c.heartbeat_at.is_(None), responses.c.heartbeat_at < older_than)
        if not owners_checked:
            rows = await self.db.fetch_all(sa.select(responses).where(sa.text(_OPEN_SQL), lapsed))
            return [StoredResponse(row) for row in rows]
        rows = await self.db.fetch_all(sa.select(responses).where(sa.text(_OPEN_SQL)))
        return [StoredResponse(row) for row in rows
                if row["heartbeat_at"] is None or row["heartbeat_at"] < older_than or owner_is_gone(row["owner"])]

    async def append_events(self, response_id: str, batch: Sequence[dict[str, Any]]) -> None:
        """Log a background response's events, and wake whoever follows it (on any replica)."""
        if batch:
            # An InsertRows write: one statement of the same text whatever the batch's size on
            # PostgreSQL, grouped with other writes on SQLite.
            rows = [{"response_id": response_id, "sequence_number": event["sequence_number"], "event": event} for event in batch]
            await self.db.write(InsertRows((events, rows)), small=len(rows) <= SMALL_WRITE_ROWS)
            # A hint only (followers also poll): the database going away between the two must not
            # have the logged events logged again.
            with contextlib.suppress(StorageUnavailableError):
                await self.db.notify(EVENTS, response_id)

    async def on_events(self, callback: Callable[[str], None]) -> None:
        """Call `callback(response_id)` when a response's log grows (see `on_cancel`)."""
        await self.db.subscribe(EVENTS, callback)

    async def events_after(self, response_id: str, after: int) -> list[dict[str, Any]]:
        rows = await self.db.fetch_all(
            sa.select(events.c.event)
            .where(events.c.response_id == response_id, events.c.sequence_number > after)
            .order_by(events.c.sequence_number)
        )
        return [row["event"] for row in rows]


def _item_rows(response_id: str, kind: str, batch: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {"response_id": response_id, "kind": kind, "position": position, "item_id": item.get("id"), "item": item}
        for position, item in enumerate(batch)
    ]
