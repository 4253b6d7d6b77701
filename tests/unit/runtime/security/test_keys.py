"""runtime.security.keys: API keys kept hashed in a real SQLite database, with expiry, revocation and the
lookup cache."""

from __future__ import annotations

from pathlib import Path

import pytest

from builder.config import SqliteBackend
from runtime.security.keys import DatabaseKeys
from runtime.storage import Database, Sql, open_database


@pytest.fixture
async def db(tmp_path: Path):  # type: ignore[no-untyped-def]
    database = open_database(SqliteBackend(type="sqlite", path=tmp_path / "stack.db"))
    yield database
    await database.close()


async def test_a_key_names_its_principal_and_only_its_hash_is_stored(db: Database) -> None:
    keys = DatabaseKeys(db, cache_s=0)
    key, record = await keys.create("dave", {"team": "blue"}, name="ci")
    principal = await keys.principal(key)
    assert principal is not None and principal.id == "dave" and principal.attributes == {"team": "blue"}
    stored = await db.read_all(Sql("SELECT * FROM api_keys"))
    assert len(stored) == 1 and key not in str(stored[0]) and record["id"] in stored[0]
    assert await keys.principal(key + "x") is None


async def test_an_expired_key_is_refused(db: Database) -> None:
    keys = DatabaseKeys(db, cache_s=0)
    key, _ = await keys.create("dave", {}, expires_in_s=-1)
    assert await keys.principal(key) is None


async def test_a_revoked_key_is_refused_once_its_cached_answer_lapses(db: Database) -> None:
    cached, fresh = DatabaseKeys(db, cache_s=300), DatabaseKeys(db, cache_s=0)
    key, record = await cached.create("dave", {})
    assert await cached.principal(key) is not None
    assert await fresh.revoke(record["id"])
    assert not await fresh.revoke(record["id"])  # once
    assert await fresh.principal(key) is None
    assert await cached.principal(key) is not None  # this replica's answer holds until cache_s passes
