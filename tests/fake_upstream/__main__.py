"""`python -m fake_upstream --port N [--host 127.0.0.1] [--api-key K]`: serve the fake upstream."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from fake_upstream.app import create_app
from fake_upstream.server import bind_socket, build_server


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m fake_upstream", description=__doc__)
    parser.add_argument("--port", type=int, required=True, help="TCP port; 0 picks a free one")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--api-key", default=None, help="require `Authorization: Bearer KEY`")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    sock = bind_socket(args.host, args.port)
    url = f"http://{args.host}:{sock.getsockname()[1]}"
    server = build_server(create_app(args.api_key), lambda: print(f"listening on {url}", flush=True))
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()


if __name__ == "__main__":
    main()
