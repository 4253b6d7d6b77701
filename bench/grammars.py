"""Custom tool grammar checks, in process: the time to check one input against Codex's apply_patch
grammar (lark) and a regex, by input size, and the time to compile a grammar the first time.

The check runs on the event loop when a model's custom tool call is whole (providers/responses/
grammars.py), so its time is time no other request of the process is served.

    .venv/bin/python bench/grammars.py [--repeats 20]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from providers.responses.grammars import compile_grammar  # noqa: E402
from support.codex import APPLY_PATCH_GRAMMAR  # noqa: E402


def best_ms(work: Callable[[], object], repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - start)
    return best * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    start = time.perf_counter()
    patch_grammar = compile_grammar("lark", APPLY_PATCH_GRAMMAR)
    print(f"compile apply_patch grammar (first time, llguidance imported): {(time.perf_counter() - start) * 1e3:.1f} ms")
    identifier = compile_grammar("regex", r"[A-Za-z_][A-Za-z0-9_]*( [A-Za-z_][A-Za-z0-9_]*)*")
    print(f"{'input':>10} {'apply_patch ms':>15} {'ms/KB':>7} {'regex ms':>9}")
    for lines in (5, 50, 300, 1000):
        patch = "*** Begin Patch\n*** Update File: app.py\n@@\n" + "".join(
            f"+    value_{i} = compute(value_{i - 1}) + 1\n" for i in range(lines)) + "*** End Patch\n"
        words = " ".join(f"word_{i}" for i in range(len(patch) // 8))
        assert patch_grammar.mismatch(patch) is None and identifier.mismatch(words) is None
        lark_ms = best_ms(lambda: patch_grammar.mismatch(patch), args.repeats)
        regex_ms = best_ms(lambda: identifier.mismatch(words), args.repeats)
        kb = len(patch) / 1024
        print(f"{kb:>8.1f}KB {lark_ms:>15.2f} {lark_ms / kb:>7.2f} {regex_ms:>9.2f}")


if __name__ == "__main__":
    main()
