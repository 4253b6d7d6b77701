"""The `stack` command. Imports are lazy so that `stack --help` answers at once."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "handler"):
        parser.print_help()
        return 2
    from builder.errors import ConfigError
    from runtime.stack import ProviderStartError

    try:
        code: int = args.handler(args)
        return code
    except (ConfigError, ProviderStartError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="stack", description="Assemble and run an OpenAI-compatible stack from a run.yaml.")
    commands = parser.add_subparsers(metavar="COMMAND")

    run = commands.add_parser("run", help="start the server for a distribution or run.yaml")
    run.add_argument("config", help="a distribution name (see list-distributions) or a path to a run.yaml")
    run.add_argument("--port", type=int, default=None, help="port to listen on (default: server.port, 8321)")
    run.add_argument("--host", default=None, help="address to bind (default: server.host)")
    run.set_defaults(handler=_run)

    build = commands.add_parser("build", help="resolve a run.yaml and render what it takes to deploy it")
    build.add_argument("--config", required=True, help="a distribution name or a path to a run.yaml")
    build.add_argument("--output", default=None, help="directory to write into (default: ./<name>-build)")
    build.add_argument("--venv", default=None, help="create this virtual environment and install the requirements into it")
    build.set_defaults(handler=_build)

    commands.add_parser("list-apis", help="list the APIs a stack can serve").set_defaults(handler=_list_apis)
    providers = commands.add_parser("list-providers", help="list installed providers, built-in and third-party")
    providers.add_argument("api", nargs="?", default=None, help="only this API's providers")
    providers.set_defaults(handler=_list_providers)
    commands.add_parser("list-distributions", help="list the distributions shipped with stack").set_defaults(handler=_list_distributions)
    return parser


def _run(args: argparse.Namespace) -> int:
    from builder.resolve import load_plan
    from runtime.server import run_server

    logging.basicConfig(level=os.environ.get("STACK_LOG_LEVEL", "INFO").upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    plan = load_plan(args.config, os.environ)
    run_server(plan, host=args.host, port=args.port)
    return 0


def _build(args: argparse.Namespace) -> int:
    from builder.render import build

    return build(args.config, output=args.output, venv=args.venv, env=os.environ)


def _list_apis(_args: argparse.Namespace) -> int:
    from providers.spec import Api

    notes = {Api.inference: "  (several providers, routed by model)", Api.tool_runtime: "  (several providers, one per tool type)"}
    for api in Api:
        print(f"{api.value}{notes.get(api, '')}")
    return 0


def _list_providers(args: argparse.Namespace) -> int:
    from builder.plugins import installed_providers
    from builder.resolve import parse_api
    from providers.spec import Api

    apis = [parse_api(args.api, ("api",))] if args.api else list(Api)
    rows = [(p.api.value, p.name, p.distribution or "?", p.spec.description if p.spec else f"BROKEN: {p.error}") for api in apis for p in installed_providers(api)]
    if not rows:
        print("no providers installed" + (f" for {args.api}" if args.api else ""))
        return 0
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    for row in rows:
        print("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:3])) + "  " + row[3])
    return 0


def _list_distributions(_args: argparse.Namespace) -> int:
    from builder.load import DISTRIBUTIONS_DIR, list_distributions

    for name in list_distributions():
        print(f"{name}  {DISTRIBUTIONS_DIR / name / 'run.yaml'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
