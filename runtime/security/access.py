"""Access policies (run.yaml `server.auth.access_policy`): grants that widen per-owner isolation.

Every stored object records its owner, and by default only its owner reaches it. A rule permits
actions (`read`, `update`, `delete`) on other owners' objects when its conditions hold:

    access_policy:
      - permit: {actions: [read]}
        when: user in owners team          # the caller shares a team with the object's owner
      - permit: {actions: [read, update, delete]}
        when: user with admin in roles     # the caller's roles hold admin: every object
      - permit: {actions: [read], principal: auditor}

The policy is worked out once per request, before any store is read (`AuthGuard`), into the
owners each action may reach (runtime.security.auth `granted_owners`), which every store query filters by.
`user in owners ATTRIBUTE` needs the owners' attributes: each principal's are recorded in the
`metadata` store the first time this process sees it (and again when they change), so a team's
members are known even when they are not calling.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from builder.config import AccessRule, access_condition
from contract.caller import Grants, Principal
from runtime.storage import FLOAT, JSON, Column, Database, Sql, String, loads, table

__all__ = ["AccessPolicy", "PrincipalRegistry"]

principals = table(
    "principals",
    Column("id", String(160), primary_key=True),
    Column("attributes", JSON, nullable=False),
    Column("seen_at", FLOAT, nullable=False),
)
_EVERY = Sql("SELECT id, CAST(attributes AS TEXT) FROM principals")


def _values(attribute: Any) -> frozenset[str]:
    """An attribute's values: a list's members, or the one value (as text)."""
    if attribute is None:
        return frozenset()
    if isinstance(attribute, (list, tuple, set, frozenset)):
        return frozenset(str(value) for value in attribute)
    return frozenset((str(attribute),))


class PrincipalRegistry:
    """The principals seen and their attributes, kept in the database so every replica knows a
    team's members; read back as a snapshot at most `refresh_s` old."""

    def __init__(self, db: Database, refresh_s: float = 5.0) -> None:
        self.db = db
        self.refresh_s = refresh_s
        self._recorded: dict[str, Mapping[str, Any]] = {}
        self._snapshot: dict[tuple[str, str], frozenset[str]] = {}
        self._taken_at = float("-inf")
        self._ready = False
        self._lock = asyncio.Lock()

    async def _tables(self) -> None:
        if not self._ready:
            await self.db.create_tables([principals])
            self._ready = True

    async def record(self, principal: Principal) -> None:
        """Note `principal`'s attributes (a database write only the first time, or when they change)."""
        if self._recorded.get(principal.id) == principal.attributes:
            return
        await self._tables()
        await self.db.upsert(principals, {"id": principal.id, "attributes": dict(principal.attributes), "seen_at": time.time()},
                             key=["id"])
        self._recorded[principal.id] = principal.attributes
        self._taken_at = float("-inf")  # this process's next look includes it

    async def sharing(self, attribute: str, values: Iterable[str]) -> frozenset[str]:
        """The principals whose `attribute` holds any of `values`."""
        if time.monotonic() - self._taken_at > self.refresh_s:
            async with self._lock:
                if time.monotonic() - self._taken_at > self.refresh_s:
                    await self._refresh()
        found: set[str] = set()
        for value in values:
            found |= self._snapshot.get((attribute, value), frozenset())
        return frozenset(found)

    async def _refresh(self) -> None:
        await self._tables()
        index: dict[tuple[str, str], set[str]] = {}
        for principal, attributes in await self.db.read_all(_EVERY):
            for name, attribute in (loads(attributes) or {}).items():
                for value in _values(attribute):
                    index.setdefault((name, value), set()).add(principal)
        self._snapshot = {key: frozenset(ids) for key, ids in index.items()}
        self._taken_at = time.monotonic()


class _Rule:
    def __init__(self, rule: AccessRule) -> None:
        self.actions = tuple(rule.permit.actions)
        self.principal = rule.permit.principal
        conditions = [access_condition(text) for text in rule.when]
        self.caller_holds = [(attribute, value) for kind, attribute, value in conditions if kind == "with"]
        self.shared = [attribute for kind, attribute, _ in conditions if kind == "owners"]

    def admits(self, caller: Principal) -> bool:
        if self.principal is not None and caller.id != self.principal:
            return False
        return all(value in _values(caller.attributes.get(attribute)) for attribute, value in self.caller_holds)


class AccessPolicy:
    """The rules of `access_policy`, worked out per caller into the owners each action reaches."""

    def __init__(self, rules: Sequence[AccessRule], registry: PrincipalRegistry) -> None:
        self.rules = [_Rule(rule) for rule in rules]
        self.registry = registry
        self.needs_owners = any(rule.shared for rule in self.rules)

    async def grants(self, caller: Principal) -> Grants | None:
        """By action, the other owners `caller` may reach (None: every owner); None when no rule
        widens anything for it."""
        if self.needs_owners:
            await self.registry.record(caller)
        grants: dict[str, frozenset[str] | None] = {}
        for rule in self.rules:
            if not rule.admits(caller):
                continue
            owners: frozenset[str] | None = None  # no owner condition: every owner
            for attribute in rule.shared:
                sharing = await self.registry.sharing(attribute, _values(caller.attributes.get(attribute)))
                owners = sharing if owners is None else owners & sharing
            for action in rule.actions:
                if action in grants and grants[action] is None:
                    continue
                grants[action] = None if owners is None else (grants.get(action) or frozenset()) | owners
        return grants or None
