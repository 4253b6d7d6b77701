"""`python -m fake_mcp --port N [--host 127.0.0.1]`: serve the test MCP server (Streamable HTTP at
/mcp, the tools of tests/fake_mcp/servers.py) until stopped, printing `listening on URL`."""

from __future__ import annotations

import argparse
import socket
from collections.abc import Sequence

import uvicorn

from fake_mcp.servers import build_server


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m fake_mcp", description=__doc__)
    parser.add_argument("--port", type=int, required=True, help="TCP port; 0 picks a free one")
    parser.add_argument("--host", default="127.0.0.1")
    args = parser.parse_args(argv)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((args.host, args.port))
    url = f"http://{args.host}:{sock.getsockname()[1]}"

    class Announcing(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets)
            print(f"listening on {url}", flush=True)

    config = uvicorn.Config(build_server("bench").streamable_http_app(), log_level="warning", access_log=False,
                            http="httptools", loop="uvloop", timeout_graceful_shutdown=1)
    try:
        Announcing(config).run(sockets=[sock])
    finally:
        sock.close()


if __name__ == "__main__":
    main()
