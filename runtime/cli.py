"""The `stack` command. Imports are lazy so that `stack --help` answers at once."""

from __future__ import annotations

import argparse
import gc
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "handler"):
        parser.print_help()
        return 2
    # While the modules load, the collector walks the growing heap again and again: 86 ms of a
    # 600 ms `stack run`. It is off until the server has started (runtime.server.serve freezes what
    # start-up made, then turns it on), or for the whole of a shorter command.
    gc.disable()
    try:
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
        except BrokenPipeError:
            # The reader went away (`stack list-providers | head`): nothing more to say, and no
            # traceback. stdout is pointed at /dev/null so that flushing it at exit does not fail again.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 1
    finally:
        gc.enable()


_BUILD_DESCRIPTION = """\
Resolve a run.yaml (a distribution's name, or a path) as `stack run` would, and write into the
output directory (default: ./<name>-build):

  run.yaml          the source, verbatim (its ${env.*} references kept), under a header saying
                    which providers were active at build time and which were not, and why
  requirements.txt  the server, then every package the active providers need (the inactive
                    ones' commented out); install it from that directory
  wheels/           the server's own wheel, when it runs from a checkout or a wheel file
                    (otherwise requirements.txt names its release on the index)
  Containerfile     a build stage that compiles what has no wheel (llama.cpp), then a slim
                    image that runs the stack as an unprivileged user, with a health check
  launch.sh         starts the stack from that run.yaml (in the --venv, if one was built)

With --venv PATH, a virtual environment is made there and the requirements installed into it;
then launch.sh starts the stack. STACK_BUILD_SERVER_REQUIREMENT replaces the server's line.
"""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="stack", description="Assemble and run an OpenAI-compatible stack from a run.yaml.")
    commands = parser.add_subparsers(metavar="COMMAND")

    run = commands.add_parser("run", help="start the server for a distribution or run.yaml")
    run.add_argument("config", help="a distribution name (see list-distributions) or a path to a run.yaml")
    run.add_argument("--port", type=int, default=None, help="port to listen on (default: server.port, 8321)")
    run.add_argument("--host", default=None, help="address to bind (default: server.host)")
    run.add_argument("--workers", type=int, default=None, help="server processes sharing the port (default: server.workers, 1)")
    run.set_defaults(handler=_run)

    build = commands.add_parser(
        "build", help="resolve a run.yaml and render what it takes to deploy it", formatter_class=argparse.RawDescriptionHelpFormatter,
        description=_BUILD_DESCRIPTION)
    build.add_argument("--config", required=True, help="a distribution name or a path to a run.yaml")
    build.add_argument("--output", default=None, help="directory to write into (default: ./<name>-build)")
    build.add_argument("--venv", default=None, help="create this virtual environment and install the requirements into it")
    build.set_defaults(handler=_build)

    keys = commands.add_parser("keys", help="make, list and revoke the API keys kept in the database (server.auth.database_keys)")
    key_commands = keys.add_subparsers(metavar="ACTION", required=True)
    create = key_commands.add_parser("create", help="make a key for a principal; the key is printed once, only its hash is kept")
    create.add_argument("--config", required=True, help="a distribution name or a path to a run.yaml")
    create.add_argument("--principal", required=True, help="who the key stands for")
    create.add_argument("--attribute", action="append", default=[], metavar="NAME=VALUE",
                        help="an attribute access policies read (repeat a name for a list, e.g. --attribute roles=admin)")
    create.add_argument("--name", default=None, help="a label to tell keys apart")
    create.add_argument("--expires-in-days", type=int, default=None, help="the key stops working after this many days")
    create.set_defaults(handler=_keys_create)
    listing = key_commands.add_parser("list", help="list the keys (never the keys themselves)")
    listing.add_argument("--config", required=True, help="a distribution name or a path to a run.yaml")
    listing.set_defaults(handler=_keys_list)
    revoke = key_commands.add_parser("revoke", help="revoke a key by its id (key_...)")
    revoke.add_argument("--config", required=True, help="a distribution name or a path to a run.yaml")
    revoke.add_argument("key_id")
    revoke.set_defaults(handler=_keys_revoke)

    sandbox = commands.add_parser("sandbox", help="the sandboxes that run code_interpreter's code")
    sandbox_commands = sandbox.add_subparsers(metavar="ACTION", required=True)
    setup = sandbox_commands.add_parser("setup", help="make the sandboxes' runtime venv (numpy, pandas, matplotlib) from the package index")
    setup.add_argument("--venv", default=None, help="where to make it (default: $STACK_SANDBOX_VENV, else ~/.cache/stack/sandbox-venv)")
    setup.set_defaults(handler=_sandbox_setup)

    commands.add_parser("list-apis", help="list the APIs a stack can serve").set_defaults(handler=_list_apis)
    providers = commands.add_parser("list-providers", help="list installed providers, built-in and third-party")
    providers.add_argument("api", nargs="?", default=None, help="only this API's providers")
    providers.set_defaults(handler=_list_providers)
    commands.add_parser("list-distributions", help="list the distributions shipped with stack").set_defaults(handler=_list_distributions)
    return parser


def _run(args: argparse.Namespace) -> int:
    from builder.resolve import load_plan
    from runtime.server.serve import run_server

    logging.basicConfig(level=os.environ.get("STACK_LOG_LEVEL", "INFO").upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    plan = load_plan(args.config, os.environ)
    from runtime.server.workers import WORKER_ENV, supervise

    workers = args.workers if args.workers is not None else plan.config.server.workers
    if workers < 1:
        print("error: --workers must be at least 1", file=sys.stderr)
        return 2
    worker = WORKER_ENV in os.environ
    if workers > 1 and not worker:
        port = args.port if args.port is not None else plan.config.server.port
        if port == 0:
            print("error: several workers need a fixed port (server.port or --port), not 0", file=sys.stderr)
            return 2
        gc.enable()
        return supervise(args.config, workers, args.host, port, plan.config.server.shutdown_grace_s)
    run_server(plan, host=args.host, port=args.port, reuse_port=worker)
    return 0


def _with_keys(config: str, work: Any) -> Any:
    """`work(keys)` on the database keys of the stack of `config`, opened for the call."""
    import asyncio

    from builder.resolve import load_plan
    from runtime.security.keys import DatabaseKeys
    from runtime.storage import Storage

    plan = load_plan(config, os.environ)

    async def run() -> Any:
        plan.state_dir.mkdir(parents=True, exist_ok=True)
        storage = Storage(plan.config.storage, plan.state_dir / "stack.db")
        try:
            return await work(DatabaseKeys(storage.database("metadata")))
        finally:
            await storage.close()

    return asyncio.run(run())


def _keys_create(args: argparse.Namespace) -> int:
    import json

    attributes: dict[str, Any] = {}
    for pair in args.attribute:
        name, equals, value = pair.partition("=")
        if not equals or not name:
            print(f"error: --attribute {pair!r}: expected NAME=VALUE", file=sys.stderr)
            return 2
        if name in attributes:  # a name given twice is a list (roles, teams)
            held = attributes[name]
            attributes[name] = [*held, value] if isinstance(held, list) else [held, value]
        else:
            attributes[name] = value
    if args.expires_in_days is not None and args.expires_in_days < 1:
        print("error: --expires-in-days must be at least 1", file=sys.stderr)
        return 2
    expires = args.expires_in_days * 86_400 if args.expires_in_days else None
    key, record = _with_keys(args.config, lambda keys: keys.create(args.principal, attributes, args.name, expires))
    print(json.dumps({"key": key, **record}, indent=2))
    print("Keep the key now: only its hash is stored, it cannot be shown again.", file=sys.stderr)
    return 0


def _keys_list(args: argparse.Namespace) -> int:
    import json

    print(json.dumps(_with_keys(args.config, lambda keys: keys.list()), indent=2))
    return 0


def _keys_revoke(args: argparse.Namespace) -> int:
    if not _with_keys(args.config, lambda keys: keys.revoke(args.key_id)):
        print(f"error: no key {args.key_id!r} that is not already revoked", file=sys.stderr)
        return 1
    print(f"revoked {args.key_id}")
    return 0


def _build(args: argparse.Namespace) -> int:
    from builder.render import build

    return build(args.config, output=args.output, venv=args.venv, env=os.environ)


def _sandbox_setup(args: argparse.Namespace) -> int:
    import subprocess
    from pathlib import Path

    from builder.sandbox_venv import RUNTIME_PACKAGES, default_venv, make_runtime_venv

    venv = Path(args.venv).expanduser().absolute() if args.venv else default_venv()
    print(f"making the sandboxes' runtime venv at {venv} ({', '.join(RUNTIME_PACKAGES)})", flush=True)
    try:
        python = make_runtime_venv(venv)
    except subprocess.CalledProcessError as error:
        print(f"error: {' '.join(map(str, error.cmd[:4]))} failed (exit status {error.returncode})", file=sys.stderr)
        return 1
    print(f"done: the bubblewrap sandboxes' `python` is {python}; the starter serves code_interpreter with "
          f"STACK_SANDBOX_VENV={venv} set")
    return 0


def _list_apis(_args: argparse.Namespace) -> int:
    from contract.spec import Api

    notes = {Api.inference: "  (several providers, routed by model)", Api.tool_runtime: "  (several providers, one per tool type)"}
    for api in Api:
        print(f"{api.value}{notes.get(api, '')}")
    return 0


def _list_providers(args: argparse.Namespace) -> int:
    from builder.plugins import installed_providers, parse_api
    from contract.spec import Api

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
