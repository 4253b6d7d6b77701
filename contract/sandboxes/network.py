"""Which hosts a sandbox may reach: the operator's `allowed_hosts`, narrowed by a container's
`network_policy: {"type": "allowlist", "allowed_domains": [...]}`.

An operator's entry is a host name (`pypi.org`), or every name under a domain (`*.pythonhosted.org`,
not the domain itself), with an optional port (`example.com:8443`); without a port it allows 443
and 80. A container's domain is a name or `*.`-pattern too, without a port: it must be covered by
an operator's entry (`files.pythonhosted.org` and `*.a.example.com` are under `*.example.com`). A
connection to a host and port is allowed when the host matches one of the container's domains and
the host and port match one of the operator's entries: the container can narrow, never widen.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from contract.errors import InvalidRequestError

__all__ = ["DEFAULT_PORTS", "MAX_DOMAINS", "HostRule", "allows", "check_allowed_domains", "normal_host", "parse_host_rule"]

DEFAULT_PORTS = (443, 80)
MAX_DOMAINS = 100
_LABEL = re.compile(r"^(?!-)[a-z0-9_-]{1,63}(?<!-)$")


@dataclass(frozen=True)
class HostRule:
    """A host name, or with `wildcard` every name under it; and the ports it opens."""

    name: str
    wildcard: bool = False
    ports: tuple[int, ...] = DEFAULT_PORTS

    def matches(self, host: str) -> bool:
        host = normal_host(host)
        return host.endswith("." + self.name) if self.wildcard else host == self.name

    def covers(self, other: HostRule) -> bool:
        """Every host `other` matches, this one matches too."""
        if not self.wildcard:
            return not other.wildcard and other.name == self.name
        return other.name.endswith("." + self.name) or (other.wildcard and other.name == self.name)

    def __str__(self) -> str:
        return ("*." if self.wildcard else "") + self.name


def normal_host(host: str) -> str:
    return host.strip().lower().rstrip(".")


def parse_host_rule(text: str, *, with_port: bool = True) -> HostRule:
    """`name`, `*.name`, and (`with_port`) either with `:port`; ValueError saying what is wrong."""
    entry = normal_host(text)
    ports: tuple[int, ...] = DEFAULT_PORTS
    if with_port and re.fullmatch(r".+:\d{1,5}", entry):
        entry, _, port = entry.rpartition(":")
        if not 0 < int(port) < 65536:
            raise ValueError(f"{text!r}: the port must be 1 to 65535")
        ports = (int(port),)
    wildcard = entry.startswith("*.")
    name = entry[2:] if wildcard else entry
    labels = name.split(".")
    if not name or len(name) > 253 or not all(_LABEL.match(label) for label in labels) or (wildcard and len(labels) < 2):
        raise ValueError(f"{text!r} is not a host name (letters, digits, `-`, dots; `*.` before a domain for every name under it"
                         + ("; `:port` after it" if with_port else "") + ")")
    return HostRule(name, wildcard, ports)


def allows(operator: Iterable[HostRule], domains: Iterable[HostRule], host: str, port: int) -> bool:
    """Whether a connection to `host`:`port` is allowed by both lists."""
    return any(rule.matches(host) for rule in domains) and any(rule.matches(host) and port in rule.ports for rule in operator)


def check_allowed_domains(value: Any, operator: Sequence[HostRule], param: str) -> tuple[str, ...]:
    """A request's `allowed_domains`, each a host name the operator's rules cover; a 400 naming `param` otherwise."""
    if not operator:
        raise InvalidRequestError(f"Invalid '{param}': this server's operator allows no hosts, so its sandboxes have no network. "
                                  "Leave network_policy out, or send {\"type\": \"disabled\"}.", param=param, code="unsupported_value")
    if not isinstance(value, list) or not value or not all(isinstance(item, str) for item in value):
        raise InvalidRequestError(f"Invalid '{param}': expected a non-empty array of domain names.", param=param, code="invalid_value")
    if len(value) > MAX_DOMAINS:
        raise InvalidRequestError(f"Invalid '{param}': at most {MAX_DOMAINS} domains, got {len(value)}.", param=param,
                                  code="invalid_value")
    domains: list[str] = []
    for item in value:
        try:
            rule = parse_host_rule(item, with_port=False)
        except ValueError as error:
            raise InvalidRequestError(f"Invalid '{param}': {error}.", param=param, code="invalid_value") from None
        if not any(allowed.covers(rule) for allowed in operator):
            raise InvalidRequestError(f"Invalid '{param}': {str(rule)!r} is not among the hosts this server's operator allows "
                                      f"({', '.join(sorted({str(allowed) for allowed in operator}))}).", param=param,
                                      code="invalid_value")
        domains.append(str(rule))
    return tuple(dict.fromkeys(domains))
