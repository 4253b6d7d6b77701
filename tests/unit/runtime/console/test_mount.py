"""Nothing of the console is imported until its first request; off, /console is no route."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = """
import sys
from builder.load import parse_config
from builder.resolve import resolve
from runtime.library_client import LibraryClient

plan = resolve(parse_config({"name": "c", "state_dir": sys.argv[1], "providers": {}, "server": {"console": sys.argv[2] == "on"}}, {}), {})
with LibraryClient(plan) as client:
    before = "runtime.console.app" in sys.modules
    status = client.http_client().get("http://stack.local/console/").status_code
    print(before, status, "runtime.console.app" in sys.modules)
"""


def run(tmp_path: Path, console: str) -> str:
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path), console], capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).resolve().parents[4])
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_the_console_is_imported_by_its_first_request_only(tmp_path: Path) -> None:
    assert run(tmp_path, "on") == ["False", "200", "True"]


def test_a_console_switched_off_is_no_route(tmp_path: Path) -> None:
    assert run(tmp_path, "off") == ["False", "404", "False"]
