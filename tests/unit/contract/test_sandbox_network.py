"""Which hosts a sandbox may reach: the operator's rules, narrowed (never widened) by a container's domains."""

from __future__ import annotations

from typing import Any

import pytest

from contract.errors import InvalidRequestError
from contract.sandboxes.network import HostRule, allows, check_allowed_domains, parse_host_rule

OPERATOR = tuple(parse_host_rule(host) for host in ("pypi.org", "*.pythonhosted.org", "api.example.com:8443"))


def test_an_operators_entry_is_a_name_or_every_name_under_a_domain_on_443_and_80_unless_it_names_a_port() -> None:
    assert parse_host_rule("PyPI.org.") == HostRule("pypi.org", False, (443, 80))
    assert parse_host_rule("*.pythonhosted.org") == HostRule("pythonhosted.org", True, (443, 80))
    assert parse_host_rule("api.example.com:8443") == HostRule("api.example.com", False, (8443,))


@pytest.mark.parametrize("entry", ["", "*", "*.org", "exa mple.com", "-a.com", "a.com:0", "a.com:70000", "http://a.com", "a..com"])
def test_what_is_not_a_host_name_is_refused_saying_so(entry: str) -> None:
    with pytest.raises(ValueError):
        parse_host_rule(entry)


def test_a_wildcard_matches_names_under_its_domain_at_any_depth_but_not_the_domain_itself() -> None:
    rule = parse_host_rule("*.pythonhosted.org")
    assert rule.matches("files.pythonhosted.org") and rule.matches("a.b.pythonhosted.org")
    assert not rule.matches("pythonhosted.org") and not rule.matches("evilpythonhosted.org")


def test_a_connection_needs_the_containers_domain_and_the_operators_host_and_port() -> None:
    domains = [parse_host_rule("files.pythonhosted.org", with_port=False), parse_host_rule("api.example.com", with_port=False)]
    assert allows(OPERATOR, domains, "files.pythonhosted.org", 443)
    assert allows(OPERATOR, domains, "api.example.com", 8443)
    assert not allows(OPERATOR, domains, "api.example.com", 443)  # the operator opened 8443 only
    assert not allows(OPERATOR, domains, "other.pythonhosted.org", 443)  # the operator's, not the container's
    assert not allows(OPERATOR, domains, "files.pythonhosted.org", 22)
    assert not allows(OPERATOR, [], "pypi.org", 443)


def test_a_containers_domains_are_kept_when_the_operator_covers_each() -> None:
    domains = ["pypi.org", "files.pythonhosted.org", "*.cdn.pythonhosted.org", "*.pythonhosted.org", "PyPI.org"]
    assert check_allowed_domains(domains, OPERATOR, "p") == ("pypi.org", "files.pythonhosted.org", "*.cdn.pythonhosted.org",
                                                             "*.pythonhosted.org")


@pytest.mark.parametrize(("domains", "operator", "words"), [
    (["pypi.org"], (), "allows no hosts"),
    (["evil.com"], OPERATOR, "not among the hosts"),
    (["*.pypi.org"], OPERATOR, "not among the hosts"),  # a name is not a wildcard
    (["pythonhosted.org"], OPERATOR, "not among the hosts"),  # nor is a wildcard its own domain
    (["pypi.org:443"], OPERATOR, "not a host name"),  # the operator says the ports
    ([], OPERATOR, "non-empty"),
    ("pypi.org", OPERATOR, "non-empty array"),
])
def test_a_domain_the_operator_does_not_allow_is_a_400_naming_the_parameter(domains: Any, operator: Any, words: str) -> None:
    with pytest.raises(InvalidRequestError) as refused:
        check_allowed_domains(domains, operator, "network_policy.allowed_domains")
    assert refused.value.status == 400 and refused.value.param == "network_policy.allowed_domains" and words in refused.value.message
