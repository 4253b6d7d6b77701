"""Declared tables: made on a fresh database, extended on one an older release made, the same on
SQLite and PostgreSQL; and the SQL statements run against them (parameters, JSON, owners, upserts)."""

from __future__ import annotations

import pytest

from contract.caller import CALLER, GRANTS
from contract.caller import Principal
from runtime.storage import (
    BIGINT, BOOLEAN, INTEGER, JSON, Column, Database, Index, InsertRows, IntegrityError, Scoped, Sql, String, Unique, in_list,
    insert_rows, loads, table,
)
from runtime.storage.schema import columns_present_sql


def notes_v1() -> tuple[Column, ...]:
    return (Column("seq", INTEGER, primary_key=True, serial=True), Column("id", String(32), nullable=False, unique=True),
            Column("body", JSON, nullable=False), Column("pinned", BOOLEAN, nullable=False, default=False),
            Column("principal", String(64), index=True))


NOTES = table("notes", *notes_v1(), Index("ix_notes_pinned", ("pinned", "seq"), where="pinned"))


async def columns_of(database: Database, name: str) -> set[str]:
    return {column for column, in await database.read_all(Sql(columns_present_sql(database.dialect)), {"name": name})}


async def test_a_declared_table_is_made_once_and_takes_rows_with_defaults_json_and_a_serial_key(database: Database) -> None:
    await database.create_tables([NOTES])
    await database.create_tables([NOTES])  # again: nothing to do, no error
    await database.write(InsertRows((NOTES, [{"id": "a", "body": {"text": "é \"q\" 🙂", "n": [1, 2.5, None]}},
                                              {"id": "b", "body": [], "pinned": True}])))
    rows = await database.read_all(Sql("SELECT seq, id, CAST(body AS TEXT), pinned FROM notes ORDER BY seq"))
    assert [(seq, note_id, loads(body), bool(pinned)) for seq, note_id, body, pinned in rows] == [
        (1, "a", {"text": "é \"q\" 🙂", "n": [1, 2.5, None]}, False), (2, "b", [], True)]
    with pytest.raises(IntegrityError):  # `unique=True`
        await database.write(InsertRows((NOTES, [{"id": "a", "body": {}}])))
    await database.create_tables([NOTES])  # as at every start: the rows stay
    assert [note_id for note_id, in await database.read_all(Sql("SELECT id FROM notes ORDER BY seq"))] == ["a", "b"]


async def test_columns_and_indexes_declared_later_are_added_to_a_table_made_earlier(database: Database) -> None:
    await database.create_tables([table("notes", *notes_v1())])
    await database.write(InsertRows((table("notes", *notes_v1()), [{"id": "old", "body": {}}])))
    later = table("notes", *notes_v1(), Column("title", String(80)), Column("meta", JSON), Index("ix_notes_title", ("title",)))
    await database.create_tables([later])
    await database.create_tables([later])  # and again, as at every start
    await database.write(InsertRows((later, [{"id": "new", "body": {}, "title": "t", "meta": {"k": 1}}])))
    rows = await database.read_all(Sql("SELECT id, title, CAST(meta AS TEXT) FROM notes ORDER BY seq"))
    assert [(note_id, title, loads(meta)) for note_id, title, meta in rows] == [("old", None, None), ("new", "t", {"k": 1})]
    index_names = Sql("SELECT indexname FROM pg_indexes WHERE tablename = 'notes' AND schemaname = current_schema()") \
        if database.dialect == "postgresql" else Sql("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'notes'")
    assert {"ix_notes_title", "ix_notes_principal"} <= {name for name, in await database.read_all(index_names)}


async def test_a_required_column_declared_later_is_refused_and_nothing_of_its_declaration_added(database: Database) -> None:
    await database.create_tables([table("notes", *notes_v1())])
    await database.write(InsertRows((table("notes", *notes_v1()), [{"id": "old", "body": {}}])))
    later = table("notes", *notes_v1(), Column("title", String(80)), Column("kind", String(8), nullable=False))
    with pytest.raises(RuntimeError, match="NOT NULL column kind"):  # the rows there have none
        await database.create_tables([later])
    assert await columns_of(database, "notes") == {"seq", "id", "body", "pinned", "principal"}  # not even the nullable one
    assert await database.read_all(Sql("SELECT id FROM notes")) == [("old",)]


async def test_a_statement_takes_a_parameter_twice_beside_a_postgresql_cast_and_in_lists(database: Database) -> None:
    tagged = table("tagged", Column("id", String(8), primary_key=True), Column("n", BIGINT, nullable=False),
                   Column("tags", JSON), Unique("uq_tagged_n", ("n", "id")))
    await database.create_tables([tagged])
    await database.write(lambda connection: insert_rows(connection, tagged, [{"id": f"t{n}", "n": n, "tags": ["x"] * n} for n in range(5)]))
    twice = Sql("SELECT id FROM tagged WHERE n >= :low AND n < :low + 2 ORDER BY n")
    assert await database.read_all(twice, {"low": 2}) == [("t2",), ("t3",)]
    listed, params = in_list("id", ["t1", "t4", "nope"])
    assert sorted(await database.read_all(Sql(f"SELECT id FROM tagged WHERE id IN {listed}"), params)) == [("t1",), ("t4",)]
    changed = await database.write_one(Sql("UPDATE tagged SET tags = :tags WHERE n > :n", json=["tags"]), {"tags": {"a": None}, "n": 2})
    assert changed == 2
    if database.dialect == "postgresql":
        cast = Sql("SELECT count(*) FROM tagged WHERE tags @> :probe::jsonb", json=["probe"])
        assert await database.read_one(cast, {"probe": {"a": None}}) == (2,)
    await database.upsert(tagged, {"id": "t0", "n": 40, "tags": None}, key=["id"])
    await database.upsert(tagged, {"id": "t9", "n": 9}, key=["id"])
    assert await database.read_all(Sql("SELECT id, n FROM tagged WHERE id IN ('t0', 't9') ORDER BY id")) == [("t0", 40), ("t9", 9)]


async def test_a_scoped_statement_reaches_the_callers_rows_and_those_the_policy_grants(database: Database) -> None:
    await database.create_tables([NOTES])
    await database.write(InsertRows((NOTES, [{"id": owner, "body": {}, "principal": owner} for owner in ("alice", "bob", "carol")])))
    mine = Scoped("SELECT id FROM notes WHERE seq > :after{owner} ORDER BY seq", "principal")
    assert mine.for_caller({"after": 0})[0] is mine.plain  # auth off: built once
    assert await database.read_all(*mine.for_caller({"after": 0})) == [("alice",), ("bob",), ("carol",)]  # any owner's
    caller = CALLER.set(Principal("bob", {}))
    try:
        assert mine.for_caller({"after": 0}) == (mine.owned, {"after": 0, "caller": "bob"})  # the caller's own: built once
        assert await database.read_all(*mine.for_caller({"after": 0})) == [("bob",)]
        grants = GRANTS.set({"read": frozenset({"carol"})})
        try:
            statement, params = mine.for_caller({"after": 0})  # several owners: made for this call
            assert statement not in (mine.plain, mine.owned) and sorted(params) == ["after", "caller_0", "caller_1"]
            assert await database.read_all(statement, params) == [("bob",), ("carol",)]
            assert await database.read_all(*mine.for_caller({"after": 0}, "delete")) == [("bob",)]
        finally:
            GRANTS.reset(grants)
    finally:
        CALLER.reset(caller)


def test_a_postgresql_text_is_numbered_once_per_name_and_leaves_casts_alone() -> None:
    statement = Sql("SELECT :a::jsonb, :b, :a FROM t WHERE x = ':not' AND y = :b_2")
    assert statement.numbered() == ("SELECT $1::jsonb, $2, $1 FROM t WHERE x = ':not' AND y = $3", ("a", "b", "b_2"))
