"""A container create request's checks: OpenAI's fields, each refused with a 400 naming it."""

from __future__ import annotations

from typing import Any

import pytest

from contract.containers.checks import new_container
from contract.containers.protocol import NewContainer
from contract.errors import InvalidRequestError


def test_a_full_request_reads_as_its_fields() -> None:
    body = {"name": "c", "file_ids": ["file-1", "file-2", "file-1"], "expires_after": {"anchor": "last_active_at", "minutes": 5},
            "memory_limit": "4g", "network_policy": {"type": "disabled"}, "skills": []}
    assert new_container(body) == NewContainer(name="c", file_ids=("file-1", "file-2"), expires_after_minutes=5, memory_limit="4g")
    assert new_container({"name": "c"}) == NewContainer(name="c")


def test_an_allowlist_reads_as_its_domains_which_the_provider_then_checks_against_the_operators_hosts() -> None:
    body = {"name": "c", "network_policy": {"type": "allowlist", "allowed_domains": ["pypi.org", "*.pythonhosted.org"]}}
    assert new_container(body).allowed_domains == ("pypi.org", "*.pythonhosted.org")
    assert new_container({"name": "c", "network_policy": {"type": "disabled"}}).allowed_domains is None


@pytest.mark.parametrize(("body", "param", "words"), [
    ({}, "name", "Missing required parameter"),
    ({"name": ""}, "name", "non-empty"),
    ({"name": "c", "image": "python"}, "image", "Unrecognized"),
    ({"name": "c", "network_policy": {"type": "allowlist", "allowed_domains": []}}, "network_policy.allowed_domains", "non-empty"),
    ({"name": "c", "network_policy": {"type": "allowlist"}}, "network_policy.allowed_domains", "non-empty"),
    ({"name": "c", "network_policy": {"type": "allowlist", "allowed_domains": ["a.org"], "domain_secrets": [
        {"domain": "a.org", "name": "KEY", "value": "v"}]}}, "network_policy.domain_secrets", "cannot add secrets"),
    ({"name": "c", "network_policy": {"type": "disabled", "allowed_domains": ["a.org"]}}, "network_policy.allowed_domains",
     "Unrecognized"),
    ({"name": "c", "network_policy": {"type": "open"}}, "network_policy", "disabled"),
    ({"name": "c", "skills": [{"type": "skill_reference", "skill_id": "s"}]}, "skills", "no skills"),
    ({"name": "c", "memory_limit": "2g"}, "memory_limit", "1g, 4g, 16g, 64g"),
    ({"name": "c", "file_ids": "file-1"}, "file_ids", "array"),
    ({"name": "c", "expires_after": {"anchor": "created_at", "minutes": 5}}, "expires_after.anchor", "last_active_at"),
    ({"name": "c", "expires_after": {"anchor": "last_active_at", "minutes": 0}}, "expires_after.minutes", "1 or more"),
    ({"name": "c", "expires_after": {"anchor": "last_active_at", "minutes": 5, "seconds": 1}}, "expires_after.seconds", "Unrecognized"),
])
def test_a_wrong_field_is_a_400_naming_it(body: dict[str, Any], param: str, words: str) -> None:
    with pytest.raises(InvalidRequestError) as refused:
        new_container(body)
    assert refused.value.status == 400 and refused.value.param == param and words in refused.value.message
