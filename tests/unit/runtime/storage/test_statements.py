"""The hot paths' statements (`Prepared`, `InsertRows`, `for_caller`) on both databases: they write and
read what SQLAlchemy itself would."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, cast

import pytest
import sqlalchemy as sa

from builder.config import SqliteBackend
from runtime import auth
from runtime.auth import Principal
from runtime.storage import Database, InsertRows, Prepared, for_caller, insert_into, json_type, open_database
from support.storage import DOC, Backend, ids_of


async def test_inserts_queued_together_go_in_as_one_statement_a_table_and_a_failing_one_fails_alone(
    database: Database, ready: sa.Table, monkeypatch: pytest.MonkeyPatch
) -> None:
    await database.execute(ready.insert().values(id="taken"))
    inserts: list[int] = []  # rows per statement run
    run = Prepared.run

    def seen(self: Prepared, connection: sa.Connection, params: Any) -> Any:
        inserts.append(len(params) if isinstance(params, list) else 1)
        return run(self, connection, params)

    monkeypatch.setattr(Prepared, "run", seen)
    writes = [database.write(InsertRows((ready, [{"id": f"{key}-1"}, {"id": f"{key}-2"}]))) for key in "abcd"]
    results = await asyncio.gather(*writes)
    assert results == [None] * 4
    if database.dialect == "sqlite":  # the first write runs alone, the three queued behind it together
        assert inserts == [2, 6], inserts
    failing = await asyncio.gather(
        *(database.write(InsertRows((ready, [{"id": key}]))) for key in ["e", "taken", "f"]), return_exceptions=True)
    assert failing[0] is None and failing[2] is None and isinstance(failing[1], sa.exc.IntegrityError)
    assert await ids_of(database, ready) == sorted([f"{key}-{n}" for key in "abcd" for n in (1, 2)] + ["e", "f", "taken"])


async def test_prepared_statements_write_what_sqlalchemy_would(database: Database, docs: sa.Table) -> None:
    table, doc = docs, DOC
    bump = Prepared(table.update().where(table.c.id == sa.bindparam("key"), table.c.kind == "live")
                    .values(n=table.c.n + sa.bindparam("by", type_=sa.Integer)).returning(table.c.n))
    drop = Prepared(table.delete().where(table.c.id.in_(sa.bindparam("keys", expanding=True))))  # SQLAlchemy's own way

    def work(connection: sa.Connection) -> list[Any]:
        insert = insert_into(table)
        insert.run(connection, [{"id": "p1", "kind": "live", "n": 1, "doc": doc}, {"id": "p2", "kind": "dead", "n": 1, "doc": None}])
        insert.run(connection, {"id": "p3", "kind": "live", "doc": doc})  # n from its column default
        connection.execute(table.insert(), {"id": "s1", "kind": "live", "n": 1, "doc": doc})  # the same through SQLAlchemy
        return [bump.run(connection, {"key": "p1", "by": 5}), bump.run(connection, {"key": "p2", "by": 5}),
                drop.run(connection, {"keys": ["p3", "nobody"]})]

    raised, dead, dropped = await database.write(work)
    assert (raised.rows, raised.scalar(), raised.rowcount) == ([(6,)], 6, 1)
    assert (dead.rows, dead.scalar(), dead.rowcount) == ([], None, 0)  # its kind is not "live"
    assert dropped.rowcount == 1
    rows = {row["id"]: dict(row) for row in await database.fetch_all(sa.select(table))}
    assert rows == {"p1": {"id": "p1", "kind": "live", "n": 6, "doc": doc}, "p2": {"id": "p2", "kind": "dead", "n": 1, "doc": None},
                    "s1": {"id": "s1", "kind": "live", "n": 1, "doc": doc}}
    texts = {row["id"]: row["text"] for row in await database.fetch_all(sa.select(table.c.id, sa.cast(table.c.doc, sa.Text).label("text")))}
    assert texts["p1"] == texts["s1"]  # the same serializer
    with pytest.raises(sa.exc.IntegrityError):
        await database.write(lambda connection: insert_into(table).run(connection, {"id": "p1", "kind": "live", "n": 1, "doc": None}))


async def test_prepared_statements_each_on_its_own_do_what_sqlalchemy_would(database: Database, docs: sa.Table) -> None:
    # One statement a write (autocommit on PostgreSQL) and reads: asyncpg runs them directly there.
    table, doc = docs, DOC
    insert = insert_into(table)
    bump = Prepared(table.update().where(table.c.id == sa.bindparam("key")).values(n=table.c.n + sa.bindparam("by", type_=sa.Integer))
                    .returning(table.c.n))
    retire = Prepared(table.update().where(table.c.kind == sa.bindparam("was")).values(kind="dead"))
    live = Prepared(sa.select(table.c.id, table.c.n).where(table.c.kind == sa.bindparam("kind")).order_by(table.c.id))

    async def alone(statement: Prepared, params: Any) -> Any:
        return await database.write(lambda connection: statement.run(connection, params), one_statement=True)

    assert (await alone(insert, [{"id": "p1", "kind": "live", "n": 1, "doc": doc}, {"id": "p2", "kind": "old", "n": 1, "doc": None}])).rowcount == 2
    assert (await alone(insert, {"id": "p3", "kind": "live", "doc": doc})).rowcount == 1  # n from its column default: SQLAlchemy's
    raised = await alone(bump, {"key": "p1", "by": 5})
    assert (raised.rows, raised.scalar(), raised.rowcount) == ([(6,)], 6, 1)
    assert (await alone(bump, {"key": "nobody", "by": 5})).rows == []
    assert (await alone(retire, {"was": "old"})).rowcount == 1
    assert (await alone(retire, {"was": "none"})).rowcount == 0
    assert await database.read_with(lambda connection: live.run(connection, {"kind": "live"}).rows) == [("p1", 6), ("p3", 7)]
    with pytest.raises(sa.exc.IntegrityError):
        await alone(insert, {"id": "p1", "kind": "live", "n": 1, "doc": None})
    assert await database.read_with(lambda connection: live.run(connection, {"kind": "dead"}).rows) == [("p2", 1)]
    rows = {row["id"]: row["doc"] for row in await database.fetch_all(sa.select(table))}
    assert rows == {"p1": doc, "p2": None, "p3": doc}
    assert bump._compiled[(database.dialect, "key", "by")] is not None  # run on the driver, not by SQLAlchemy


async def test_prepared_statements_write_and_read_json_as_sqlalchemy_does(database: Database, docs: sa.Table) -> None:
    # None in a JSON column is JSON null, as SQLAlchemy writes it, not SQL NULL; a JSON column read
    # comes back decoded on both databases (the drivers would give text on one, objects on the other).
    table, doc = docs, DOC
    read = Prepared(sa.select(table.c.id, table.c.doc).order_by(table.c.id))
    sql_nulls = sa.select(sa.func.count().label("nulls")).select_from(table).where(table.c.doc.is_(None))

    def work(connection: sa.Connection) -> None:
        insert_into(table).run(connection, {"id": "p1", "kind": "live", "n": 1, "doc": None})
        connection.execute(table.insert(), {"id": "s1", "kind": "live", "n": 1, "doc": None})  # SQLAlchemy's own insert

    await database.write(work)
    await database.write(lambda connection: insert_into(table).run(connection, {"id": "p2", "kind": "live", "n": 1, "doc": None}),
                         one_statement=True)  # on asyncpg directly, on PostgreSQL
    await database.write(lambda connection: insert_into(table).run(connection, {"id": "p3", "kind": "live", "n": 1, "doc": doc}),
                         one_statement=True)
    assert [row["nulls"] for row in await database.fetch_all(sql_nulls)] == [0]
    texts = {row["id"]: row["text"] for row in await database.fetch_all(sa.select(table.c.id, sa.cast(table.c.doc, sa.Text).label("text")))}
    assert texts["p1"] == texts["p2"] == texts["s1"] and texts["p1"] is not None
    decoded = [("p1", None), ("p2", None), ("p3", doc), ("s1", None)]
    assert await database.read_with(lambda connection: read.run(connection, {}).rows) == decoded
    assert await database.write(lambda connection: read.run(connection, {}).rows, one_statement=True) == decoded


async def test_a_statement_for_several_granted_owners_is_run_by_sqlalchemy_not_compiled_at_each_call(tmp_path: Path) -> None:
    db = open_database(SqliteBackend(type="sqlite", path=tmp_path / "s.db"))
    owned = sa.Table("o", sa.MetaData(), sa.Column("k", sa.Integer, primary_key=True), sa.Column("owner", sa.String(16)))
    plain = Prepared(sa.select(owned.c.k).where(owned.c.k >= sa.bindparam("low")).order_by(owned.c.k))
    own = Prepared(cast(Any, plain.statement).where(owned.c.owner == sa.bindparam("caller")))
    caller, grants = auth._current.set(Principal("alice", {})), auth._grants.set({"read": frozenset({"bob"})})
    try:
        await db.create_tables(owned.metadata)
        await db.write(lambda connection: insert_into(owned).run(connection, [{"k": k, "owner": owner} for k, owner in
                                                                             enumerate(["alice", "bob", "carol", "bob"])]))
        statement, params = for_caller(plain, own, owned.c.owner, {"low": 1})
        assert await db.read_with(lambda connection: statement.run(connection, params).rows, small=True) == [(1,), (3,)]
        assert statement._compiled == {}  # its IN list is SQLAlchemy's to expand: compiling it here would be wasted
    finally:
        auth._grants.reset(grants)
        auth._current.reset(caller)
        await db.close()


async def test_insert_rows_write_what_separate_inserts_would_and_all_or_nothing(database: Database, backend: Backend) -> None:
    # On PostgreSQL they are one statement (jsonb_to_recordset); on SQLite an insert a table.
    metadata = sa.MetaData(schema=backend.schema)
    parents = sa.Table("parents", metadata, sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),
                       sa.Column("id", sa.String(16), nullable=False, unique=True), sa.Column("at", sa.Float, nullable=False),
                       sa.Column("live", sa.Boolean, nullable=False, default=False), sa.Column("doc", json_type(), nullable=True),
                       sa.Column("note", sa.String(16), nullable=True))
    children = sa.Table("children", metadata, sa.Column("parent", sa.String(16), primary_key=True),
                        sa.Column("position", sa.Integer, primary_key=True), sa.Column("body", json_type(), nullable=False))
    await database.create_tables(metadata)
    doc = DOC
    at = 1764033352.123456
    parent = {"id": "p1", "at": at, "live": True, "doc": None, "note": None}
    bodies = [{"n": n, "doc": doc} for n in range(3)]
    assert (InsertRows((parents, [parent]), (children, [{"parent": "p1", "position": n, "body": body} for n, body in enumerate(bodies)]))
            .alone_on_postgres()) is not None
    await database.write(InsertRows((parents, [parent]), (children, [{"parent": "p1", "position": n, "body": body} for n, body in enumerate(bodies)])))
    await database.write(lambda connection: connection.execute(parents.insert(), {**parent, "id": "s1"}))  # SQLAlchemy's own insert
    rows = {row["id"]: dict(row) for row in await database.fetch_all(
        sa.select(parents.c.id, parents.c.at, parents.c.live, parents.c.doc, parents.c.note))}
    assert rows["p1"] == {**rows["s1"], "id": "p1"}
    assert {key: rows["p1"][key] for key in ("at", "live", "doc", "note")} == {"at": at, "live": True, "doc": None, "note": None}
    assert [row["body"] for row in await database.fetch_all(sa.select(children.c.body).order_by(children.c.position))] == bodies
    # A row of the second table fails: the first table's row is not left behind.
    with pytest.raises(sa.exc.IntegrityError):
        await database.write(InsertRows((parents, [{**parent, "id": "p2"}]), (children, [{"parent": "p1", "position": 0, "body": {}}])))
    assert sorted(row["id"] for row in await database.fetch_all(sa.select(parents.c.id))) == ["p1", "s1"]
    # A column left to its Python default: as separate inserts, which fill it in.
    assert InsertRows((parents, [{"id": "p3", "at": at}])).alone_on_postgres() is None
    await database.write(InsertRows((parents, [{"id": "p3", "at": at}])))
    assert await database.fetch_all(sa.select(parents.c.live).where(parents.c.id == "p3")) == [{"live": False}]
