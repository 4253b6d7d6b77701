"""A fast HTTP/1.1 keep-alive transport for httpx2: asyncio protocols + the httptools C parser.

See `PooledTransport` for the design. The package is split by role:

- `transport`: `PooledTransport` (the httpx2 transport) and the request encoding;
- `pool`: `Pool`, the connections to one origin, and the pool-wait timeout;
- `connection`: `Connection` (the `asyncio.Protocol` driving the httptools parser) and the
  response body stream;
- `_common`: what several of them share.
"""

from runtime.transports.fast.connection import HIGH_WATER as HIGH_WATER
from runtime.transports.fast.connection import LOW_WATER as LOW_WATER
from runtime.transports.fast.transport import PooledTransport

__all__ = ["PooledTransport"]
