"""Declared tables: made on a fresh database, extended on one an older release made, the same on
SQLite and PostgreSQL; and the SQL statements run against them (parameters, JSON, owners, upserts)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from builder.config import PostgresBackend, SqliteBackend
from runtime import auth
from runtime.auth import Principal
from runtime.storage import (
    BIGINT, BOOLEAN, INTEGER, JSON, Column, Database, Index, InsertRows, IntegrityError, Scoped, Sql, String, Unique, in_list,
    insert_rows, loads, open_database, table,
)
from support.storage import PG_DSN, pg_admin


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def db(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Database]:
    if request.param == "sqlite":
        database = open_database(SqliteBackend(type="sqlite", path=tmp_path / "schema.db"))
        try:
            yield database
        finally:
            await database.close()
        return
    admin = await pg_admin()
    name = f"stack_test_{uuid.uuid4().hex[:12]}"  # a database of its own: declared tables live in its default schema
    await admin.execute(f'CREATE DATABASE "{name}"')
    database = open_database(PostgresBackend(type="postgres", dsn=PG_DSN.rsplit("/", 1)[0] + "/" + name))
    try:
        yield database
    finally:
        await database.close()
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


def notes_v1() -> tuple[Column, ...]:
    return (Column("seq", INTEGER, primary_key=True, serial=True), Column("id", String(32), nullable=False, unique=True),
            Column("body", JSON, nullable=False), Column("pinned", BOOLEAN, nullable=False, default=False),
            Column("principal", String(64), index=True))


NOTES = table("notes", *notes_v1(), Index("ix_notes_pinned", ("pinned", "seq"), where="pinned"))


async def test_a_declared_table_is_made_once_and_takes_rows_with_defaults_json_and_a_serial_key(db: Database) -> None:
    await db.create_tables([NOTES])
    await db.create_tables([NOTES])  # again: nothing to do, no error
    await db.write(InsertRows((NOTES, [{"id": "a", "body": {"text": "é \"q\" 🙂", "n": [1, 2.5, None]}},
                                        {"id": "b", "body": [], "pinned": True}])))
    rows = await db.read_all(Sql("SELECT seq, id, CAST(body AS TEXT), pinned FROM notes ORDER BY seq"))
    assert [(seq, note_id, loads(body), bool(pinned)) for seq, note_id, body, pinned in rows] == [
        (1, "a", {"text": "é \"q\" 🙂", "n": [1, 2.5, None]}, False), (2, "b", [], True)]
    with pytest.raises(IntegrityError):  # `unique=True`
        await db.write(InsertRows((NOTES, [{"id": "a", "body": {}}])))


async def test_columns_and_indexes_declared_later_are_added_to_a_table_made_earlier(db: Database) -> None:
    await db.create_tables([table("notes", *notes_v1())])
    await db.write(InsertRows((table("notes", *notes_v1()), [{"id": "old", "body": {}}])))
    later = table("notes", *notes_v1(), Column("title", String(80)), Column("meta", JSON), Index("ix_notes_title", ("title",)))
    await db.create_tables([later])
    await db.write(InsertRows((later, [{"id": "new", "body": {}, "title": "t", "meta": {"k": 1}}])))
    rows = await db.read_all(Sql("SELECT id, title, CAST(meta AS TEXT) FROM notes ORDER BY seq"))
    assert [(note_id, title, loads(meta)) for note_id, title, meta in rows] == [("old", None, None), ("new", "t", {"k": 1})]
    index_names = Sql("SELECT indexname FROM pg_indexes WHERE tablename = 'notes'") if db.dialect == "postgresql" else \
        Sql("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'notes'")
    assert {"ix_notes_title", "ix_notes_principal"} <= {name for name, in await db.read_all(index_names)}
    with pytest.raises(RuntimeError, match="NOT NULL column kind"):
        await db.create_tables([table("notes", *notes_v1(), Column("kind", String(8), nullable=False))])


async def test_a_statement_takes_a_parameter_twice_beside_a_postgresql_cast_and_in_lists(db: Database) -> None:
    tagged = table("tagged", Column("id", String(8), primary_key=True), Column("n", BIGINT, nullable=False),
                   Column("tags", JSON), Unique("uq_tagged_n", ("n", "id")))
    await db.create_tables([tagged])
    await db.write(lambda connection: insert_rows(connection, tagged, [{"id": f"t{n}", "n": n, "tags": ["x"] * n} for n in range(5)]))
    twice = Sql("SELECT id FROM tagged WHERE n >= :low AND n < :low + 2 ORDER BY n")
    assert await db.read_all(twice, {"low": 2}) == [("t2",), ("t3",)]
    listed, params = in_list("id", ["t1", "t4", "nope"])
    assert sorted(await db.read_all(Sql(f"SELECT id FROM tagged WHERE id IN {listed}"), params)) == [("t1",), ("t4",)]
    changed = await db.write_one(Sql("UPDATE tagged SET tags = :tags WHERE n > :n", json=["tags"]), {"tags": {"a": None}, "n": 2})
    assert changed == 2
    if db.dialect == "postgresql":
        cast = Sql("SELECT count(*) FROM tagged WHERE tags @> :probe::jsonb", json=["probe"])
        assert await db.read_one(cast, {"probe": {"a": None}}) == (2,)
    await db.upsert(tagged, {"id": "t0", "n": 40, "tags": None}, key=["id"])
    await db.upsert(tagged, {"id": "t9", "n": 9}, key=["id"])
    assert await db.read_all(Sql("SELECT id, n FROM tagged WHERE id IN ('t0', 't9') ORDER BY id")) == [("t0", 40), ("t9", 9)]


async def test_json_text_with_a_null_character_is_kept(db: Database) -> None:
    await db.create_tables([NOTES])
    await db.write(InsertRows((NOTES, [{"id": "nul", "body": {"text": "a\u0000b", "escaped": "\\u0000"}}])))
    body = loads((await db.read_one(Sql("SELECT CAST(body AS TEXT) FROM notes WHERE id = 'nul'")) or ("null",))[0])
    # PostgreSQL's JSONB holds no NUL: it is kept as U+FFFD there; a backslash before "u0000" is text, kept as it is.
    assert body == {"text": "a\ufffdb" if db.dialect == "postgresql" else "a\u0000b", "escaped": "\\u0000"}


async def test_a_scoped_statement_reaches_the_callers_rows_and_those_the_policy_grants(db: Database) -> None:
    await db.create_tables([NOTES])
    await db.write(InsertRows((NOTES, [{"id": owner, "body": {}, "principal": owner} for owner in ("alice", "bob", "carol")])))
    mine = Scoped("SELECT id FROM notes WHERE seq > :after{owner} ORDER BY seq", "principal")
    assert await db.read_all(*mine.for_caller({"after": 0})) == [("alice",), ("bob",), ("carol",)]  # auth off: any owner's
    caller = auth._current.set(Principal("bob", {}))
    grants = auth._grants.set({"read": frozenset({"carol"})})
    try:
        assert await db.read_all(*mine.for_caller({"after": 0})) == [("bob",), ("carol",)]
        assert await db.read_all(*mine.for_caller({"after": 0}, "delete")) == [("bob",)]
    finally:
        auth._grants.reset(grants)
        auth._current.reset(caller)


def test_a_postgresql_text_is_numbered_once_per_name_and_leaves_casts_alone() -> None:
    statement = Sql("SELECT :a::jsonb, :b, :a FROM t WHERE x = ':not' AND y = :b_2")
    assert statement.numbered() == ("SELECT $1::jsonb, $2, $1 FROM t WHERE x = ':not' AND y = $3", ("a", "b", "b_2"))
