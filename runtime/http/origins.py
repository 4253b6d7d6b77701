"""Whether a form body (multipart or URL-encoded) comes from a browser page of another origin.

Any web page can make a browser send a form, multipart or URL-encoded, to any address without a
CORS preflight; read, it would let any site a user visits run requests on a stack on their machine
or network (store files on it, or run a response, when auth is off). What such a page cannot hide
or forge is what the browser adds on its own: `Origin` (on every POST, in every current browser)
and `Sec-Fetch-Site` (`cross-site` or `same-site` for a page of another origin; `same-origin` for
the server's own pages, `none` for what the user typed). Programs (the openai SDK, OGX's
`llama-stack-client`, httpx, curl) send neither, so their forms are read with no key when auth is off.

A form is read unless the request shows a page of another origin: `Sec-Fetch-Site` other than
`same-origin` or `none`, or, from a browser that does not send that header, an `Origin` whose
host and port are not the request's `Host`. Still read from such a page: a request with an
`Authorization` header (a page of another origin can add one only after a preflight, and this
server grants preflights only to the origins its CORS config allows), and one whose `Origin` the
CORS config allows (`server.cors.allow_origins`; `*` allows every origin).
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["from_other_origin"]

_SAME_ORIGIN_SITES = (b"same-origin", b"none")


def from_other_origin(headers: Iterable[tuple[bytes, bytes]], allowed_origins: frozenset[bytes] = frozenset()) -> bool:
    """Whether a request (its ASGI headers, names in lower case) is a browser page's of another
    origin, whose form body must not be read. `allowed_origins`: the CORS config's, as bytes."""
    origin = site = host = None
    for name, value in headers:
        if name == b"authorization":
            return False
        if name == b"origin":
            origin = value
        elif name == b"sec-fetch-site":
            site = value.strip().lower()
        elif name == b"host":
            host = value
    if origin is not None and (origin in allowed_origins or b"*" in allowed_origins):
        return False
    if site is not None:
        return site not in _SAME_ORIGIN_SITES
    return origin is not None and (host is None or _authority(origin) != host.strip().lower())


def _authority(origin: bytes) -> bytes | None:
    """The host and port of `scheme://host[:port]`, lowercased; None for `null` (a sandboxed or
    opaque origin) or anything else that is not an origin. The scheme is left out: behind a proxy
    that ends TLS the browser's origin is https while the request reaching the server is http."""
    scheme, separator, authority = origin.strip().lower().partition(b"://")
    if not separator or not scheme or not authority or b"/" in authority:
        return None
    return authority
