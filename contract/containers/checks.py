"""The checks of a container create request (`POST /v1/containers`), in OpenAI's words: a 400 naming
the parameter. The code_interpreter tool's `container: {"type": "auto", ...}` may use them too
(`file_ids`, `memory_limit`, `network_policy`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from contract.containers.protocol import NewContainer
from contract.errors import InvalidRequestError
from contract.sandboxes.protocol import MEMORY_TIERS

__all__ = ["MAX_FILE_IDS", "MAX_NAME", "check_file_ids", "check_memory_limit", "check_network_policy", "new_container"]

MAX_NAME = 256
MAX_FILE_IDS = 100
_FIELDS = ("name", "file_ids", "expires_after", "memory_limit", "network_policy", "skills")


def new_container(body: Mapping[str, Any]) -> NewContainer:
    """A create request's body, checked: every field known, each of its type and range."""
    for key in body:
        if key not in _FIELDS:
            raise InvalidRequestError(f"Unrecognized request argument supplied: {str(key)[:80]}", param=str(key), code="unknown_parameter")
    name = body.get("name")
    if name is None:
        raise InvalidRequestError("Missing required parameter: 'name'.", param="name", code="missing_required_parameter")
    if not isinstance(name, str) or not name.strip() or len(name) > MAX_NAME:
        raise InvalidRequestError(f"Invalid 'name': expected a non-empty string of at most {MAX_NAME} characters.", param="name",
                                  code="invalid_value")
    allowed_domains = check_network_policy(body.get("network_policy"), "network_policy")
    if body.get("skills"):
        raise InvalidRequestError("Invalid 'skills': this server's containers take no skills.", param="skills", code="unsupported_parameter")
    return NewContainer(name=name, file_ids=check_file_ids(body.get("file_ids"), "file_ids"),
                        expires_after_minutes=_expires_after(body.get("expires_after")),
                        memory_limit=check_memory_limit(body.get("memory_limit"), "memory_limit"), allowed_domains=allowed_domains)


def check_file_ids(value: Any, param: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(item, str) and item for item in value):
        raise InvalidRequestError(f"Invalid type for '{param}': expected an array of file ids.", param=param, code="invalid_type")
    if len(value) > MAX_FILE_IDS:
        raise InvalidRequestError(f"Invalid '{param}': at most {MAX_FILE_IDS} files, got {len(value)}.", param=param, code="invalid_value")
    return tuple(dict.fromkeys(value))  # a file named twice is copied once


def check_memory_limit(value: Any, param: str) -> str | None:
    if value is None:
        return None
    if value not in MEMORY_TIERS:
        raise InvalidRequestError(f"Invalid '{param}': {str(value)[:20]!r} (expected one of: {', '.join(MEMORY_TIERS)}).", param=param,
                                  code="invalid_value")
    return str(value)


def _expires_after(value: Any) -> int | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise InvalidRequestError("Invalid type for 'expires_after': expected an object {anchor, minutes}.", param="expires_after",
                                  code="invalid_type")
    for key in value:
        if key not in ("anchor", "minutes"):
            raise InvalidRequestError(f"Unrecognized request argument supplied: expires_after.{str(key)[:80]}",
                                      param=f"expires_after.{key}", code="unknown_parameter")
    if value.get("anchor") != "last_active_at":
        raise InvalidRequestError("Invalid 'expires_after.anchor': expected 'last_active_at'.", param="expires_after.anchor",
                                  code="invalid_value")
    minutes = value.get("minutes")
    if not isinstance(minutes, int) or isinstance(minutes, bool) or minutes < 1:
        raise InvalidRequestError("Invalid 'expires_after.minutes': expected a whole number of minutes, 1 or more.",
                                  param="expires_after.minutes", code="invalid_value")
    return minutes


def check_network_policy(value: Any, param: str) -> tuple[str, ...] | None:
    """OpenAI's `{"type": "disabled"}` (None: no network) or `{"type": "allowlist", "allowed_domains": [...]}`
    (its domains, as given: whether this server's operator allows them is the containers provider's to say)."""
    if value is None:
        return None
    kind = value.get("type") if isinstance(value, Mapping) else None
    if kind not in ("disabled", "allowlist"):
        raise InvalidRequestError(f"Invalid '{param}': expected {{\"type\": \"disabled\"}} or {{\"type\": \"allowlist\", "
                                  "\"allowed_domains\": [...]}.", param=param, code="invalid_value")
    known = ("type",) if kind == "disabled" else ("type", "allowed_domains", "domain_secrets")
    for key in value:
        if key not in known:
            raise InvalidRequestError(f"Unrecognized request argument supplied: {param}.{str(key)[:80]}", param=f"{param}.{key}",
                                      code="unknown_parameter")
    if kind == "disabled":
        return None
    if value.get("domain_secrets"):
        raise InvalidRequestError(f"Invalid '{param}.domain_secrets': this server's proxy passes encrypted traffic through "
                                  "untouched, so it cannot add secrets to it.", param=f"{param}.domain_secrets", code="unsupported_parameter")
    domains = value.get("allowed_domains")
    if not isinstance(domains, list) or not domains or not all(isinstance(domain, str) and domain for domain in domains):
        raise InvalidRequestError(f"Invalid '{param}.allowed_domains': expected a non-empty array of domain names.",
                                  param=f"{param}.allowed_domains", code="invalid_value")
    return tuple(domains)
