"""runtime.security.access: access policy rules worked out into the owners each action reaches, with the
principals' attributes recorded in a real SQLite database."""

from __future__ import annotations

from pathlib import Path

import pytest

from builder.config import SqliteBackend
from builder.errors import ConfigError
from builder.load import parse_config
from runtime.security.access import AccessPolicy, PrincipalRegistry
from contract.caller import Principal
from runtime.storage import open_database


def policy_of(rules: list[dict[str, object]], registry: PrincipalRegistry) -> AccessPolicy:
    config = parse_config({"server": {"auth": {"header": {}, "access_policy": rules}}}, {})
    assert config.server.auth is not None
    return AccessPolicy(config.server.auth.access_policy, registry)


@pytest.fixture
async def registry(tmp_path: Path):  # type: ignore[no-untyped-def]
    db = open_database(SqliteBackend(type="sqlite", path=tmp_path / "stack.db"))
    yield PrincipalRegistry(db, refresh_s=0)
    await db.close()


ALICE = Principal("alice", {"team": "blue"})
CAROL = Principal("carol", {"team": ["blue", "green"]})
DAN = Principal("dan", {"team": "green"})
BOB = Principal("bob", {"team": "red"})
ROOT = Principal("root", {"roles": ["admin", "ops"]})


async def test_team_rules_reach_the_owners_sharing_a_value(registry: PrincipalRegistry) -> None:
    policy = policy_of([{"permit": {"actions": ["read"]}, "when": "user in owners team"}], registry)
    for principal in (ALICE, CAROL, DAN, BOB):
        await policy.grants(principal)  # each recorded as it calls
    assert await policy.grants(ALICE) == {"read": frozenset({"alice", "carol"})}
    assert await policy.grants(CAROL) == {"read": frozenset({"alice", "carol", "dan"})}
    assert await policy.grants(BOB) == {"read": frozenset({"bob"})}
    assert await policy.grants(ROOT) == {"read": frozenset()}  # no team: no one else's


async def test_caller_conditions_and_principal_rules_reach_every_owner(registry: PrincipalRegistry) -> None:
    policy = policy_of([{"permit": {"actions": ["read", "delete"]}, "when": ["user with admin in roles"]},
                        {"permit": {"actions": ["read"], "principal": "bob"}}], registry)
    assert await policy.grants(ROOT) == {"read": None, "delete": None}
    assert await policy.grants(BOB) == {"read": None}
    assert await policy.grants(ALICE) is None  # nothing widened: its own only


async def test_a_changed_attribute_is_recorded_again(registry: PrincipalRegistry) -> None:
    policy = policy_of([{"permit": {"actions": ["read"]}, "when": "user in owners team"}], registry)
    await policy.grants(ALICE)
    await policy.grants(BOB)
    assert await policy.grants(Principal("bob", {"team": "blue"})) == {"read": frozenset({"alice", "bob"})}
    assert await policy.grants(ALICE) == {"read": frozenset({"alice", "bob"})}


def test_an_unknown_condition_is_a_config_error_naming_its_path() -> None:
    with pytest.raises(ConfigError) as error:
        parse_config({"server": {"auth": {"header": {}, "access_policy": [
            {"permit": {"actions": ["read"]}, "when": "user is admin"}]}}}, {})
    message = str(error.value)
    assert "access_policy" in message and "user is admin" in message and "user in owners ATTRIBUTE" in message


def test_an_unknown_action_is_a_config_error() -> None:
    with pytest.raises(ConfigError) as error:
        parse_config({"server": {"auth": {"header": {}, "access_policy": [{"permit": {"actions": ["write"]}}]}}}, {})
    assert "actions" in str(error.value)
