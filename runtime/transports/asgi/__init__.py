"""In-process httpx2 transports that stream responses from an ASGI app.

The app and everything it owns (DB connections, upstream HTTP clients) live on
one dedicated event loop in a background thread (`BackgroundLoop`). The sync
and async transports marshal each request onto that loop, so loop-bound
resources stay valid whatever thread or loop the caller uses. Responses are
returned as soon as the app sends `http.response.start`; body chunks are handed
over one by one through a bounded pipe, so server-sent events arrive
incrementally.
"""

from runtime.transports.asgi.exchange import ASGIApp, Message, Receive, Scope, Send
from runtime.transports.asgi.loop import BackgroundLoop
from runtime.transports.asgi.transports import AsyncThreadedASGITransport, ThreadedASGITransport

__all__ = [
    "ASGIApp",
    "AsyncThreadedASGITransport",
    "BackgroundLoop",
    "Message",
    "Receive",
    "Scope",
    "Send",
    "ThreadedASGITransport",
]
