"""Who is calling: the principal a request acts for, and the other owners' objects the access
policy lets it reach. Set by the runtime's authentication (runtime.security.auth) for the length of
a request; read by whatever keeps records per owner: the storage layer's scoped statements, the
providers' stores, the logs. With authentication off there is no caller, and every record is
everyone's.
"""

from __future__ import annotations

import contextvars
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["CALLER", "GRANTS", "Grants", "Principal", "current_principal", "granted_owners", "principal_id"]


@dataclass(frozen=True)
class Principal:
    """Who a request acts for: an id, and attributes that access policies may read (team, roles)."""

    id: str
    attributes: Mapping[str, Any] = field(default_factory=dict)
    method: str = "api_key"


CALLER: contextvars.ContextVar[Principal | None] = contextvars.ContextVar("principal", default=None)
"""The principal of the request being served; set by the runtime's authentication alone."""


def current_principal() -> Principal | None:
    """The principal of the request being served (None when auth is off)."""
    return CALLER.get()


def principal_id() -> str | None:
    """The id stores record as an object's owner and filter by: the caller's (None when auth is
    off, or for the server's own work outside a request, such as the sweep of orphans)."""
    principal = CALLER.get()
    return None if principal is None else principal.id


Grants = Mapping[str, "frozenset[str] | None"]
"""By action (read, update, delete): the owners whose objects the caller may reach besides its
own; None: every owner's. An action not named reaches only the caller's own objects."""

GRANTS: contextvars.ContextVar[Grants | None] = contextvars.ContextVar("grants", default=None)
"""What the access policy grants the caller; set by the runtime's authentication alone."""


def granted_owners(action: str) -> frozenset[str] | None:
    """The owners whose objects the caller may `action` (its own among them); None: any owner's.
    The access policy (runtime.security.access) widens the caller's own; with auth off, anyone's."""
    principal = CALLER.get()
    if principal is None:
        return None
    grants = GRANTS.get()
    if grants is None or action not in grants:
        return frozenset((principal.id,))
    others = grants[action]
    return None if others is None else others | {principal.id}
