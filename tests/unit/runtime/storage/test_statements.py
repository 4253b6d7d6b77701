"""The hot paths' statements (`Sql` with RETURNING and IN lists, `insert_rows`, `InsertRows`) on both
databases: what they return, and that every way of writing a row writes the same row."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from runtime.storage import (
    BOOLEAN, FLOAT, INTEGER, JSON, Column, Database, InsertRows, IntegrityError, Ran, Sql, String, Table, in_list, insert_rows, loads, table,
)
from runtime.storage.postgres import PgConnection
from support.storage import DOC, ids_of

INSERT_ID = Sql("INSERT INTO items (id, n) VALUES (:id, 0)")


async def test_inserts_queued_together_go_in_as_one_statement_a_table_and_a_failing_one_fails_alone(
    database: Database, ready: Table, monkeypatch: pytest.MonkeyPatch
) -> None:
    await database.write_one(INSERT_ID, {"id": "taken"})
    inserts: list[int] = []  # rows per INSERT statement run
    run = Sql.run

    def seen(self: Sql, connection: Any, params: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None) -> Ran:
        if self.text.startswith("INSERT"):
            rows = params.get("rows0") if isinstance(params, Mapping) and "rows0" in params else params
            inserts.append(len(rows) if isinstance(rows, list) else 1)
        return run(self, connection, params)

    monkeypatch.setattr(Sql, "run", seen)
    writes = [database.write(InsertRows((ready, [{"id": f"{key}-1"}, {"id": f"{key}-2"}]))) for key in "abcd"]
    assert await asyncio.gather(*writes) == [None] * 4
    # SQLite: the first write runs alone, the three queued behind it together. PostgreSQL: a
    # statement a write, in autocommit (the rows sent as one JSON array).
    assert inserts == ([2, 6] if database.dialect == "sqlite" else [2, 2, 2, 2]), inserts
    failing = await asyncio.gather(
        *(database.write(InsertRows((ready, [{"id": key}]))) for key in ["e", "taken", "f"]), return_exceptions=True)
    assert failing[0] is None and failing[2] is None and isinstance(failing[1], IntegrityError)
    assert await ids_of(database, ready) == sorted([f"{key}-{n}" for key in "abcd" for n in (1, 2)] + ["e", "f", "taken"])


async def test_statements_in_one_transaction_return_rows_counts_and_defaults(database: Database, docs: Table) -> None:
    doc = DOC
    bump = Sql("UPDATE docs SET n = n + :by WHERE id = :key AND kind = 'live' RETURNING n")
    listed, keys = in_list("key", ["p3", "nobody"])
    drop = Sql(f"DELETE FROM docs WHERE id IN {listed}")

    def work(connection: Any) -> list[Ran]:
        insert_rows(connection, docs, [{"id": "p1", "kind": "live", "n": 1, "doc": doc}, {"id": "p2", "kind": "dead", "n": 1, "doc": None}])
        insert_rows(connection, docs, [{"id": "p3", "kind": "live", "doc": doc}])  # n from its declared default
        Sql("INSERT INTO docs (id, kind, n, doc) VALUES (:id, :kind, :n, :doc)", json=["doc"]).run(
            connection, {"id": "s1", "kind": "live", "n": 1, "doc": doc})  # the same by a statement of one's own
        return [bump.run(connection, {"key": "p1", "by": 5}), bump.run(connection, {"key": "p2", "by": 5}), drop.run(connection, keys)]

    raised, dead, dropped = await database.write(work)
    assert (raised.rows, raised.scalar(), raised.first(), raised.rowcount) == ([(6,)], 6, (6,), 1)
    assert (dead.rows, dead.scalar(), dead.first(), dead.rowcount) == ([], None, None, 0)  # its kind is not "live"
    assert dropped.rowcount == 1
    rows = {row[0]: (row[1], row[2], loads(row[3])) for row in await database.read_all(Sql("SELECT id, kind, n, CAST(doc AS TEXT) FROM docs"))}
    assert rows == {"p1": ("live", 6, doc), "p2": ("dead", 1, None), "s1": ("live", 1, doc)}
    texts = dict(await database.read_all(Sql("SELECT id, CAST(doc AS TEXT) FROM docs")))
    assert texts["p1"] == texts["s1"]  # the same serializer
    with pytest.raises(IntegrityError):
        await database.write(lambda connection: insert_rows(connection, docs, [{"id": "p1", "kind": "live", "n": 1, "doc": None}]))


async def test_statements_each_on_its_own_return_rows_and_counts(database: Database, docs: Table) -> None:
    # One statement a write (autocommit on PostgreSQL), and reads.
    doc = DOC
    insert = Sql("INSERT INTO docs (id, kind, n, doc) VALUES (:id, :kind, :n, :doc)", json=["doc"])
    bump = Sql("UPDATE docs SET n = n + :by WHERE id = :key RETURNING n")
    retire = Sql("UPDATE docs SET kind = 'dead' WHERE kind = :was")
    live = Sql("SELECT id, n FROM docs WHERE kind = :kind ORDER BY id")

    async def alone(statement: Sql, params: Any) -> Ran:
        return await database.write(lambda connection: statement.run(connection, params), one_statement=True)

    many = await alone(insert, [{"id": "p1", "kind": "live", "n": 1, "doc": doc}, {"id": "p2", "kind": "old", "n": 1, "doc": None}])
    assert many.rowcount == 2  # one executemany
    assert (await alone(insert, [{"id": "p3", "kind": "live", "n": 7, "doc": doc}])).rowcount == 1  # a list of one
    assert (await alone(insert, [])).rowcount == 0  # none: not run
    raised = await alone(bump, {"key": "p1", "by": 5})
    assert (raised.rows, raised.scalar(), raised.rowcount) == ([(6,)], 6, 1)
    assert (await alone(bump, {"key": "nobody", "by": 5})).rows == []
    assert (await alone(retire, {"was": "old"})).rowcount == 1
    assert (await alone(retire, {"was": "none"})).rowcount == 0
    assert await database.read_with(lambda connection: live.run(connection, {"kind": "live"}).rows) == [("p1", 6), ("p3", 7)]
    with pytest.raises(IntegrityError):
        await alone(insert, {"id": "p1", "kind": "live", "n": 1, "doc": None})
    assert await database.read_with(lambda connection: live.run(connection, {"kind": "dead"}).rows) == [("p2", 1)]
    docs_read = {key: loads(text) for key, text in await database.read_all(Sql("SELECT id, CAST(doc AS TEXT) FROM docs"))}
    assert docs_read == {"p1": doc, "p2": None, "p3": doc}


async def test_none_in_a_json_column_is_sql_null_by_every_way_of_writing_it(database: Database, docs: Table) -> None:
    # Not JSON null: `CAST(doc AS TEXT)` reads None, and `doc IS NULL` finds the row, on both databases.
    row = {"kind": "live", "n": 1, "doc": None}
    await database.write(lambda connection: insert_rows(connection, docs, [{"id": "r1", **row}, {"id": "r2", **row}]))  # executemany
    await database.write(lambda connection: insert_rows(connection, docs, [{"id": "r3", **row}]), one_statement=True)
    await database.write(InsertRows((docs, [{"id": "r4", **row}])))  # on PostgreSQL, through a JSON array of rows
    await database.write_one(Sql("INSERT INTO docs (id, kind, n, doc) VALUES (:id, :kind, :n, :doc)", json=["doc"]), {"id": "r5", **row})
    await database.upsert(docs, {"id": "r6", **row}, key=["id"])
    await database.write(InsertRows((docs, [{"id": "d1", "kind": "live", "n": 1, "doc": DOC}])))
    await database.upsert(docs, {"id": "d1", **row}, key=["id"])  # an update to None, too
    nulls = await database.read_all(Sql("SELECT id FROM docs WHERE doc IS NULL ORDER BY id"))
    assert nulls == [("d1",), ("r1",), ("r2",), ("r3",), ("r4",), ("r5",), ("r6",)]
    assert {text for _, text in await database.read_all(Sql("SELECT id, CAST(doc AS TEXT) FROM docs"))} == {None}


async def test_insert_rows_write_what_separate_inserts_would_and_all_or_nothing(database: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    # On PostgreSQL they are one statement (jsonb_to_recordset); on SQLite an insert a table.
    parents = table("parents", Column("seq", INTEGER, primary_key=True, serial=True),
                    Column("id", String(16), nullable=False, unique=True), Column("at", FLOAT, nullable=False),
                    Column("live", BOOLEAN, nullable=False, default=False), Column("doc", JSON), Column("note", String(16)))
    children = table("children", Column("parent", String(16), primary_key=True), Column("position", INTEGER,
                     primary_key=True), Column("body", JSON, nullable=False))
    await database.create_tables([parents, children])
    at = 1764033352.123456
    parent = {"id": "p1", "at": at, "live": True, "doc": None, "note": None}
    bodies = [{"n": n, "doc": DOC} for n in range(3)]
    both = InsertRows((parents, [parent]), (children, [{"parent": "p1", "position": n, "body": body} for n, body in enumerate(bodies)]))
    assert both.alone_on_postgres() is not None
    statements: list[str] = []
    run = PgConnection.run

    def noted(self: PgConnection, statement: Sql, batch: Sequence[Mapping[str, Any]], many: bool) -> Ran:
        statements.append(statement.text)
        return run(self, statement, batch, many)

    monkeypatch.setattr(PgConnection, "run", noted)
    await database.write(both)
    if database.dialect == "postgresql":
        assert len(statements) == 1 and "jsonb_to_recordset" in statements[0]  # one round trip, no BEGIN nor COMMIT
    await database.write(lambda connection: insert_rows(connection, parents, [{**parent, "id": "s1"}]))  # an insert of its own
    read = Sql("SELECT id, at, live, CAST(doc AS TEXT), note FROM parents ORDER BY seq")
    rows = {row[0]: (row[1], bool(row[2]), row[3], row[4]) for row in await database.read_all(read)}
    assert rows == {"p1": (at, True, None, None), "s1": (at, True, None, None)}
    assert [loads(body) for body, in await database.read_all(Sql("SELECT CAST(body AS TEXT) FROM children ORDER BY position"))] == bodies
    # A row of the second table fails: the first table's row is not left behind.
    with pytest.raises(IntegrityError):
        await database.write(InsertRows((parents, [{**parent, "id": "p2"}]), (children, [{"parent": "p1", "position": 0, "body": {}}])))
    assert await database.read_all(Sql("SELECT id FROM parents ORDER BY seq")) == [("p1",), ("s1",)]
    # A column left out takes its declared default, in one statement on PostgreSQL too; rows of
    # different columns go in as separate inserts, which give the same rows.
    assert InsertRows((parents, [{"id": "p3", "at": at}])).alone_on_postgres() is not None
    await database.write(InsertRows((parents, [{"id": "p3", "at": at}])))
    differing = InsertRows((parents, [{"id": "p4", "at": at}, {"id": "p5", "at": at, "note": "n"}]))
    assert differing.alone_on_postgres() is None
    await database.write(differing)
    rows = {row[0]: (row[1], bool(row[2]), row[3], row[4]) for row in await database.read_all(read)}
    assert [rows[key] for key in ("p3", "p4", "p5")] == [(at, False, None, None), (at, False, None, None), (at, False, None, "n")]
    assert [key for key, in await database.read_all(Sql("SELECT id FROM parents ORDER BY seq"))] == ["p1", "s1", "p3", "p4", "p5"]
