"""Which addresses a URL taken from a request may reach."""

from __future__ import annotations

import pytest

from contract.errors import InvalidRequestError
from runtime.security.netguard import AddressPolicy


@pytest.mark.parametrize("address", ["93.184.216.34", "2606:4700:4700::1111"])
def test_public_addresses_are_open(address: str) -> None:
    assert AddressPolicy().allows("example.com", address)


@pytest.mark.parametrize("address", [
    "127.0.0.1", "10.1.2.3", "172.16.0.1", "192.168.1.1", "169.254.169.254", "100.64.0.1", "0.0.0.0",
    "::1", "fe80::1", "fc00::1", "::ffff:127.0.0.1", "224.0.0.1",
])
def test_private_loopback_link_local_and_reserved_addresses_are_closed(address: str) -> None:
    assert not AddressPolicy().allows("example.com", address)


def test_run_yaml_opens_hosts_addresses_and_networks() -> None:
    policy = AddressPolicy(["10.0.0.0/8", "127.0.0.1", "mcp.internal"])
    assert policy.allows("x", "10.9.8.7") and policy.allows("x", "127.0.0.1") and policy.allows("x", "::ffff:10.1.1.1")
    assert policy.allows("MCP.internal.", "192.168.5.5")  # by its name, wherever it resolves
    assert not policy.allows("x", "192.168.5.5") and not policy.allows("x", "127.0.0.2")


async def test_a_url_is_checked_where_its_host_resolves() -> None:
    closed, opened = AddressPolicy(), AddressPolicy(["127.0.0.0/8"])
    with pytest.raises(InvalidRequestError) as error:
        await closed.check_url("http://localhost:8080/mcp", "tools[0].server_url")
    assert error.value.param == "tools[0].server_url" and "private or reserved" in error.value.message
    await opened.check_url("http://localhost:8080/mcp", "tools[0].server_url")
    await closed.check_url("https://93.184.216.34/mcp", "p")


@pytest.mark.parametrize("url", ["ftp://example.com/x", "file:///etc/passwd", "http:///nohost", "not a url"])
async def test_only_http_urls_with_a_host_pass(url: str) -> None:
    with pytest.raises(InvalidRequestError, match="expected an http or https URL"):
        await AddressPolicy().check_url(url, "p")


async def test_a_host_that_does_not_resolve_is_a_400() -> None:
    with pytest.raises(InvalidRequestError, match="cannot resolve"):
        await AddressPolicy().check_url("http://no-such-host.invalid/mcp", "p")
