"""Which requests' form bodies are a browser page's of another origin: what a cross-site page cannot
hide (Origin, Sec-Fetch-Site) decides, not whether the client sent a key."""

from __future__ import annotations

import pytest

from runtime.http.origins import from_other_origin

HOST = (b"host", b"127.0.0.1:8321")


def headers(**named: str) -> list[tuple[bytes, bytes]]:
    return [HOST, *((name.replace("_", "-").encode(), value.encode()) for name, value in named.items())]


@pytest.mark.parametrize("sent", [
    {},  # the openai SDK with no key, OGX's llama-stack-client, httpx, curl: no browser header at all
    {"user_agent": "llama-stack-client/0.2", "x_stainless_lang": "python"},
    {"sec_fetch_site": "same-origin", "origin": "http://127.0.0.1:8321"},  # the server's own pages (its /docs)
    {"sec_fetch_site": "none"},  # what the user typed or bookmarked
    {"origin": "http://127.0.0.1:8321"},  # a browser that sends no Sec-Fetch-Site, on the server's own page
    {"origin": "HTTPS://127.0.0.1:8321"},  # the scheme is not compared: a proxy may end TLS in front
    {"sec_fetch_site": "same-origin", "origin": "https://stack.example.com"},  # behind a proxy that rewrites Host
])
def test_a_program_or_the_servers_own_page_is_read(sent: dict[str, str]) -> None:
    assert not from_other_origin(headers(**sent))


@pytest.mark.parametrize("sent", [
    {"origin": "https://evil.example", "sec_fetch_site": "cross-site"},
    {"origin": "http://127.0.0.1:3000", "sec_fetch_site": "same-site"},  # another port of the same machine
    {"sec_fetch_site": "cross-site"},
    {"sec_fetch_site": "Cross-Site"},
    {"origin": "https://evil.example"},  # a browser that sends no Sec-Fetch-Site
    {"origin": "http://127.0.0.1:3000"},
    {"origin": "null"},  # a sandboxed frame, a file:// page, a redirect across origins
    {"origin": "http://127.0.0.1:8321/path"},
    {"origin": "127.0.0.1:8321"},
    {"origin": "http://127.0.0.1:8321", "sec_fetch_site": "cross-site"},  # the browser's own word wins
])
def test_a_browser_page_of_another_origin_is_not(sent: dict[str, str]) -> None:
    assert from_other_origin(headers(**sent))


def test_an_origin_without_a_host_is_another_origin() -> None:
    assert from_other_origin([(b"origin", b"http://127.0.0.1:8321")])


def test_an_authorization_header_is_read_from_anywhere() -> None:
    # A page of another origin can add one only after a preflight, which this server grants only to
    # the origins CORS allows: it is a program's, or such an origin's.
    assert not from_other_origin(headers(origin="https://evil.example", sec_fetch_site="cross-site", authorization="Bearer none"))


def test_an_origin_the_cors_config_allows_is_read() -> None:
    sent = headers(origin="https://app.example.com", sec_fetch_site="cross-site")
    assert not from_other_origin(sent, frozenset({b"https://app.example.com"}))
    assert not from_other_origin(sent, frozenset({b"*"}))
    assert from_other_origin(sent, frozenset({b"https://other.example.com"}))
    assert from_other_origin(headers(sec_fetch_site="cross-site"), frozenset({b"*"}))  # no origin to allow
