"""Stored responses, their input and output items, and the event log of background responses.

A response row keeps `ancestors`, the ids of every response before it in its previous_response_id
chain (root first), so the context of a new turn is read in two queries whatever the chain's
length: the previous response's row, then the items of all its ancestors and itself.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable, Sequence
from typing import Any

from contract.caller import principal_id
from contract.errors import NotFoundError
from runtime.storage.owners import owner_is_gone, process_owner
from runtime.storage import (
    BOOLEAN, FLOAT, INTEGER, JSON, SMALL_WRITE_ROWS, Column, Database, Index, InsertRows, Scoped, Sql, StorageUnavailableError, String,
    in_list, insert_rows, loads, owner_condition, table,
)

__all__ = ["ResponseStore", "StoredResponse"]

_OPEN_SQL = "status IN ('queued', 'in_progress')"  # literal, so the planner matches it to the partial index

responses = table(
    "responses",
    Column("seq", INTEGER, primary_key=True, serial=True),
    Column("id", String(96), nullable=False, unique=True),
    Column("created_at", FLOAT, nullable=False),
    Column("status", String(32), nullable=False),
    Column("background", BOOLEAN, nullable=False, default=False),
    Column("ancestors", JSON, nullable=False),
    Column("conversation_id", String(96), index=True),
    Column("response", JSON, nullable=False),
    Column("request", JSON),
    Column("heartbeat_at", FLOAT),
    # The process producing it (runtime.storage.owners): a restart on its host takes it over at once.
    Column("owner", String(160)),
    # Who made it (runtime.security.auth): with auth on, only they reach it. Null when auth was off.
    Column("principal", String(160)),
    Index("ix_responses_principal", ("principal", "seq")),
    # Only the responses still being produced: the sweep for orphans reads this, never the table.
    Index("ix_responses_open", ("heartbeat_at",), where=_OPEN_SQL),
)
items = table(
    "response_items",
    Column("seq", INTEGER, primary_key=True, serial=True),
    Column("response_id", String(96), nullable=False),
    Column("kind", String(8), nullable=False),  # input | output
    Column("position", INTEGER, nullable=False),
    Column("item_id", String(128), index=True),
    Column("item", JSON, nullable=False),
    Index("ix_response_items_response", ("response_id", "kind", "position")),
)
events = table(
    "response_events",
    Column("response_id", String(96), primary_key=True),
    Column("sequence_number", INTEGER, primary_key=True),
    Column("event", JSON, nullable=False),
)


CANCELS = "stack_response_cancel"
"""The channel on which a cancel is announced to the process running the response."""
EVENTS = "stack_response_events"
"""The channel on which a background response's new logged events are announced to followers."""

# What a StoredResponse is made of, in its order.
_ROW = "id, status, background, CAST(ancestors AS TEXT), CAST(response AS TEXT), CAST(request AS TEXT), heartbeat_at, owner"
_GET = Scoped(f"SELECT {_ROW} FROM responses WHERE id = :rid{{owner}}", "principal")
_EXISTS = Scoped("SELECT id FROM responses WHERE id = :rid{owner}", "principal")
_DROP_OUTPUT = Sql("DELETE FROM response_items WHERE response_id = :rid AND kind = 'output'")
_HEARTBEAT = Sql("UPDATE responses SET heartbeat_at = :now, owner = :owner WHERE id = :rid RETURNING status")
_CHAIN_ITEMS = "SELECT response_id, kind, position, CAST(item AS TEXT) FROM response_items WHERE response_id IN {chain}"
_ITEMS_OF = Sql("SELECT CAST(item AS TEXT) FROM response_items WHERE response_id = :rid AND kind = :kind ORDER BY position")
_EVENTS_AFTER = Sql("SELECT CAST(event AS TEXT) FROM response_events WHERE response_id = :rid AND sequence_number > :after "
                    "ORDER BY sequence_number")
_DISCARD = [Sql(f"DELETE FROM {name} WHERE {key} = :rid")
            for name, key in (("response_items", "response_id"), ("response_events", "response_id"), ("responses", "id"))]
_OPEN = Sql(f"SELECT {_ROW} FROM responses WHERE {_OPEN_SQL}")
_LAPSED = Sql(f"SELECT {_ROW} FROM responses WHERE {_OPEN_SQL} AND (heartbeat_at IS NULL OR heartbeat_at < :older_than)")
_ITEM_COLUMNS = "response_id VARCHAR(96), kind VARCHAR(8), position INTEGER, item_id VARCHAR(128), item JSONB"


def _if_status(only_if_status: Sequence[str], params: dict[str, Any]) -> str:
    """The condition (` AND ...`) that the stored status is one of `only_if_status` (any if empty),
    with its parameters added to `params`. One status, the usual case, is a plain equality."""
    if not only_if_status:
        return ""
    if len(only_if_status) == 1:
        params["status_was"] = only_if_status[0]
        return " AND status = :status_was"
    listed, values = in_list("status", list(only_if_status))
    params.update(values)
    return f" AND status IN {listed}"


@functools.lru_cache(maxsize=32)
def _finish(condition: str) -> Sql:
    """The final state of response `:rid`, if its stored status meets `condition`."""
    return Sql(f"UPDATE responses SET status = :new_status, response = :new_response WHERE id = :rid{condition}", json=["new_response"])


@functools.lru_cache(maxsize=32)
def _set_status(condition: str) -> Sql:
    """A background response's new state and the caller's lease on it (conditioned on its status)."""
    return Sql(f"UPDATE responses SET status = :new_status, response = :new_response, heartbeat_at = :now, owner = :owner "
               f"WHERE id = :rid{condition}", json=["new_response"])


@functools.lru_cache(maxsize=32)
def _finish_in_one(condition: str) -> Sql:
    """PostgreSQL: `finish` as one statement. The update (if the stored status meets `condition`),
    the old output's delete and the new output's insert (`:rows`, as JSON) are data-modifying WITHs
    gated on the update; it selects how many rows the update matched. All three read the same
    snapshot, so the delete does not see the rows inserted beside it."""
    return Sql(
        f"WITH done AS (UPDATE responses SET status = :new_status, response = :new_response WHERE id = :rid{condition} RETURNING id), "
        "dropped AS (DELETE FROM response_items WHERE response_id IN (SELECT id FROM done) AND kind = 'output'), "
        "added AS (INSERT INTO response_items (response_id, kind, position, item_id, item) "
        "SELECT added.response_id, added.kind, added.position, added.item_id, added.item "
        f"FROM done JOIN jsonb_to_recordset(:rows::jsonb) AS added({_ITEM_COLUMNS}) ON true) "
        "SELECT count(*) FROM done",
        json=["new_response", "rows"])


def _not_found(response_id: str) -> NotFoundError:
    return NotFoundError(f"Response with id '{response_id}' not found.", param="response_id", code="not_found")


class StoredResponse:
    """A response row: the public object plus what the engine needs to continue from it."""

    __slots__ = ("id", "status", "background", "ancestors", "response", "request", "heartbeat_at", "owner")

    def __init__(self, row: tuple[Any, ...]) -> None:
        self.id: str = row[0]
        self.status: str = row[1]
        self.background: bool = bool(row[2])
        self.ancestors: list[str] = list(loads(row[3]))
        self.response: dict[str, Any] = loads(row[4])
        self.request: dict[str, Any] | None = loads(row[5])
        self.heartbeat_at: float | None = row[6]
        self.owner: str | None = row[7]


class ResponseStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def create_tables(self) -> None:
        await self.db.create_tables([responses, items, events])

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
            finish = _finish_in_one(condition)
            return await self.db.write(lambda connection: bool(finish.run(connection, {**params, "rows": rows}).scalar()), one_statement=True)

        update = _finish(condition)

        def work(connection: Any) -> bool:
            if not update.run(connection, params).rowcount:
                return False
            _DROP_OUTPUT.run(connection, {"rid": response["id"]})
            if rows:
                insert_rows(connection, items, rows)
            return True

        return await self.db.write(work, small=len(rows) <= SMALL_WRITE_ROWS)

    async def get(self, response_id: str, action: str = "read") -> StoredResponse:
        """The response, if the caller may `action` it (any, with auth off): else a 404, as if absent."""
        row = await self.db.read_one(*_GET.for_caller({"rid": response_id}, action))
        if row is None:
            raise _not_found(response_id)
        return StoredResponse(row)

    async def readable(self, response_id: str) -> bool:
        """Whether the response is stored and the caller may read it: one indexed row, for a
        cache to trust its copy (another replica may have deleted it)."""
        return await self.db.read_one(*_EXISTS.for_caller({"rid": response_id})) is not None

    async def context(self, response_id: str) -> tuple[StoredResponse, list[dict[str, Any]]]:
        """The response and every item of its chain (its ancestors' and its own), in order."""
        previous = await self.get(response_id)
        chain = [*previous.ancestors, previous.id]
        listed, params = in_list("chain", chain)
        rows = await self.db.read_all(Sql(_CHAIN_ITEMS.format(chain=listed)), params)
        order = {rid: index for index, rid in enumerate(chain)}
        rows.sort(key=lambda row: (order[row[0]], row[1] != "input", row[2]))
        return previous, [loads(row[3]) for row in rows]

    async def items_of(self, response_id: str, kind: str) -> list[dict[str, Any]]:
        rows = await self.db.read_all(_ITEMS_OF, {"rid": response_id, "kind": kind})
        return [loads(text) for text, in rows]

    async def items_by_id(self, item_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        if not item_ids:
            return {}
        listed, params = in_list("item", list(item_ids))
        query = "SELECT response_items.item_id, CAST(response_items.item AS TEXT) FROM response_items"
        if principal_id() is not None:  # another owner's items are not there to reference
            owner, granted = owner_condition("responses.principal")
            query += f" JOIN responses ON responses.id = response_items.response_id WHERE response_items.item_id IN {listed}{owner}"
            params.update(granted)
        else:
            query += f" WHERE response_items.item_id IN {listed}"
        rows = await self.db.read_all(Sql(query), params)
        return {item_id: loads(text) for item_id, text in rows}

    async def page(self, *, after: str | None, limit: int, order: str) -> tuple[list[dict[str, Any]], bool]:
        owner, params = owner_condition("principal")
        query = f"SELECT CAST(response AS TEXT) FROM responses WHERE true{owner}"
        if after is not None:
            query += f" AND seq {'>' if order == 'asc' else '<'} (SELECT seq FROM responses WHERE id = :after)"
            params["after"] = after
        query += f" ORDER BY seq {'ASC' if order == 'asc' else 'DESC'} LIMIT :rows"
        rows = await self.db.read_all(Sql(query), {**params, "rows": limit + 1})
        return [loads(text) for text, in rows[:limit]], len(rows) > limit

    async def input_items(self, response_id: str, *, after: str | None, limit: int, order: str) -> tuple[list[dict[str, Any]], bool]:
        await self.get(response_id)
        query = "SELECT CAST(item AS TEXT) FROM response_items WHERE response_id = :rid AND kind = 'input'"
        params: dict[str, Any] = {"rid": response_id, "rows": limit + 1}
        if after is not None:
            query += (f" AND position {'>' if order == 'asc' else '<'} (SELECT position FROM response_items "
                      "WHERE response_id = :rid AND kind = 'input' AND item_id = :after)")
            params["after"] = after
        query += f" ORDER BY position {'ASC' if order == 'asc' else 'DESC'} LIMIT :rows"
        rows = await self.db.read_all(Sql(query), params)
        return [loads(text) for text, in rows[:limit]], len(rows) > limit

    async def delete(self, response_id: str) -> None:
        await self.get(response_id, "delete")
        await self.discard(response_id)

    async def discard(self, response_id: str) -> None:
        """Remove a response with its items and events, whoever may delete it: for one its client
        never saw (its request was refused before any output)."""

        def work(connection: Any) -> None:
            for delete in _DISCARD:
                delete.run(connection, {"rid": response_id})

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
        update = _set_status(_if_status(only_if_status, params))
        changed = await self.db.write(lambda connection: update.run(connection, params).rowcount, small=True, one_statement=True)
        return changed > 0

    async def heartbeat(self, response_id: str) -> str | None:
        """Refresh the lease of a running background response; returns its stored status (None if it is gone)."""
        params = {"rid": response_id, "now": time.time(), "owner": process_owner()}
        status = await self.db.write(lambda connection: _HEARTBEAT.run(connection, params).scalar(), small=True, one_statement=True)
        return None if status is None else str(status)

    async def renew_leases(self, response_ids: Sequence[str]) -> None:
        """Refresh the lease of responses this process is streaming."""
        if not response_ids:
            return
        listed, params = in_list("rid", list(response_ids))
        renew = Sql(f"UPDATE responses SET heartbeat_at = :now, owner = :owner WHERE id IN {listed} AND {_OPEN_SQL}")
        await self.db.write_one(renew, {**params, "now": time.time(), "owner": process_owner()})

    async def orphaned(self, older_than: float, *, owners_checked: bool = False) -> list[StoredResponse]:
        """Responses still queued or being produced whose lease nobody renewed; with
        `owners_checked`, also those whose lease runs yet but whose process is gone (a crash on
        this host: see runtime.storage.owners)."""
        if not owners_checked:
            rows = await self.db.read_all(_LAPSED, {"older_than": older_than})
            return [StoredResponse(row) for row in rows]
        found = [StoredResponse(row) for row in await self.db.read_all(_OPEN)]
        return [response for response in found
                if response.heartbeat_at is None or response.heartbeat_at < older_than or owner_is_gone(response.owner)]

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
        rows = await self.db.read_all(_EVENTS_AFTER, {"rid": response_id, "after": after})
        return [loads(text) for text, in rows]


def _item_rows(response_id: str, kind: str, batch: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {"response_id": response_id, "kind": kind, "position": position, "item_id": item.get("id"), "item": item}
        for position, item in enumerate(batch)
    ]
