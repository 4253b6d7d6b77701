"""Conversations: listing items at any conversation size, and responses that read a whole conversation.

Starts the fake upstream (tests/fake_upstream) and `stack run bench/stack-run.yaml`, then:

- builds conversations of 10, 100, 1,000 and 10,000 items (`POST /v1/conversations/{id}/items`, 20
  items per call, several calls at once: their order within a conversation does not matter here),
  and walks each one page by page to check its size and find the id in its middle (and, after the
  responses, that they added nothing);
- measures `GET /v1/conversations/{id}/items?limit=100` at c=1 on 10, 1,000 and 10,000 items: the
  first page, and a page deep in the list (`after=<the middle id>`);
- measures `POST /v1/responses` with `conversation: <id>`, `input: "hi"`, `store: false` (so the
  conversation does not grow) on 10, 100 and 1,000 items, beside the upstream's own latency for a
  chat request with the same messages, and checks the upstream received every item: each item's
  text is 3 whitespace tokens, and the fake upstream's `prompt_tokens` (the response's
  `usage.input_tokens`) counts the whitespace tokens of every message: 3 x items + 1.

All at c=1; the sizes (and the upstream alone) take turns in 5 rounds, so that a slow spell of the
shared machine falls on all of them alike.

    .venv/bin/python bench/conversations.py [--requests 500] [--response-requests 200] [--json PATH]
                                            [--py-spy DIR]

Cores (2-core machine): the stack server alone on core 0; the fake upstream and this load
generator on core 1. Targets: listing p50 < 2 ms at 10,000 items, and flat across sizes.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any


from common import (
    run_with_servers,
    write_results,
    CLIENT_CORE,
    STACK_CORE,
    Request,
    Row,
    Samples,
    Servers,
    connect,
    fetch,
    fetch_all,
    get,
    percentile,
    post,
    profiling,
    progress,
    sample_interleaved,
    table,
    verdict,
    wait_healthy,
)

ROOT = Path(__file__).resolve().parent.parent
RUN_YAML = ROOT / "bench" / "stack-run.yaml"
MODEL = "fake-model"
ITEM_TEXT = "a b c"  # 3 whitespace tokens (and few characters: the fake upstream allows 20,000 in all)
ITEM_TOKENS = 3
INPUT = "hi"
INPUT_TOKENS = 1
PER_CALL = 20  # the API's limit of items per append
PAGE = 100
LIST_SIZES = (10, 1_000, 10_000)
RESPONSE_SIZES = (10, 100, 1_000)
EXPECT_LIST = b'"object":"list"'

TARGET_LIST_P50_MS = 2.0
TARGET_FLAT_RATIO = 1.25  # p50 at 10,000 items over p50 at 1,000 (both pages hold 100 items)

LATENCY_WARMUP = 50
ROUNDS = 5  # the sizes take turns, in this many rounds


# ---------------------------------------------------------------------------------------------
# Requests


def item(index: int) -> dict[str, str]:
    return {"type": "message", "role": "user" if index % 2 == 0 else "assistant", "content": ITEM_TEXT}


def append_calls(port: int, conversation_id: str, size: int) -> list[Request]:
    """The appends that give a conversation `size` items, PER_CALL at a time."""
    return [post(port, f"/v1/conversations/{conversation_id}/items",
                 {"items": [item(index) for index in range(start, min(size, start + PER_CALL))]}, EXPECT_LIST, keep=True)
            for start in range(0, size, PER_CALL)]


def list_items(port: int, conversation_id: str, after: str | None = None, order: str | None = None,
               keep: bool = False) -> Request:
    query = f"limit={PAGE}" + (f"&after={after}" if after else "") + (f"&order={order}" if order else "")
    return get(port, f"/v1/conversations/{conversation_id}/items?{query}", EXPECT_LIST, keep=keep)


def expected_tokens(size: int) -> int:
    return size * ITEM_TOKENS + INPUT_TOKENS


def response_in(port: int, conversation_id: str, size: int, keep: bool = False) -> Request:
    body = {"model": MODEL, "input": INPUT, "conversation": conversation_id, "store": False}
    return post(port, "/v1/responses", body, f'"input_tokens":{expected_tokens(size)},'.encode(), keep=keep)


def upstream_chat(port: int, size: int) -> Request:
    """The chat completion the stack sends upstream for a response in a conversation of `size` items."""
    messages = [{"role": item(index)["role"], "content": ITEM_TEXT} for index in range(size)]
    messages.append({"role": "user", "content": INPUT})
    body = {"model": MODEL, "messages": messages}
    return post(port, "/v1/chat/completions", body, f'"prompt_tokens":{expected_tokens(size)},'.encode())


# ---------------------------------------------------------------------------------------------
# The run


@dataclass
class Options:
    requests: int
    response_requests: int
    setup_concurrency: int
    json_path: Path | None
    profile_dir: Path | None


def summary(samples: Samples) -> dict[str, Any]:
    return {"count": len(samples.totals), "errors": samples.errors,
            "p50_ms": percentile(samples.totals, 0.5), "p99_ms": percentile(samples.totals, 0.99)}


async def item_ids(port: int, conversation_id: str) -> list[str]:
    """Every item id of a conversation, oldest first, page by page."""
    ids: list[str] = []
    after: str | None = None
    conn = await connect(port)
    try:
        while True:
            reply = await conn.exchange(list_items(port, conversation_id, after, "asc", keep=True))
            if not reply.ok:
                raise RuntimeError(f"listing {conversation_id} failed with {reply.status}: {reply.body[:200]!r}")
            page = reply.json()
            ids += [entry["id"] for entry in page["data"]]
            if not page["has_more"]:
                return ids
            after = page["last_id"]
    finally:
        conn.close()


async def build(port: int, sizes: list[int], concurrency: int) -> dict[int, str]:
    """A conversation of each size (appends of every conversation sent `concurrency` at a time)."""
    conversations: dict[int, str] = {}
    for size in sizes:
        reply = await fetch(port, post(port, "/v1/conversations", {}, b'"object":"conversation"', keep=True))
        if not reply.ok:
            raise RuntimeError(f"creating a conversation failed with {reply.status}")
        conversations[size] = reply.json()["id"]
    calls = [call for size, conversation_id in conversations.items() for call in append_calls(port, conversation_id, size)]
    began = time.perf_counter()
    replies = await fetch_all(port, calls, concurrency)
    failed = sum(not reply.ok for reply in replies) + len(calls) - len(replies)
    if failed:
        raise RuntimeError(f"{failed} of {len(calls)} appends failed")
    progress(f"{len(calls)} appends ({sum(sizes):,} items) in {time.perf_counter() - began:.1f} s")
    return conversations


async def run_bench(options: Options, servers: Servers) -> dict[str, Any]:
    assert servers.stack is not None
    await wait_healthy(servers.stack_port, "/v1/health", servers.stack)
    stack, upstream = servers.stack_port, servers.upstream_port
    stack_pid = servers.stack.pid
    sizes = sorted(set(LIST_SIZES) | set(RESPONSE_SIZES))
    conversations = await build(stack, sizes, options.setup_concurrency)
    middle: dict[int, str] = {}
    for size, conversation_id in conversations.items():
        ids = await item_ids(stack, conversation_id)
        if len(ids) != size:
            raise RuntimeError(f"conversation of {size} items lists {len(ids)}")
        middle[size] = ids[size // 2]
    results: dict[str, Any] = {"list": {}, "responses": {}}

    pages: dict[str, tuple[int, Request]] = {}
    for size in LIST_SIZES:
        pages[f"{size} first"] = (stack, list_items(stack, conversations[size]))
        pages[f"{size} middle"] = (stack, list_items(stack, conversations[size], middle[size]))
    with profiling(options.profile_dir, "list", stack_pid):
        listed = await sample_interleaved(pages, options.requests, LATENCY_WARMUP, ROUNDS)
    for size in LIST_SIZES:
        results["list"][str(size)] = {"first_page": summary(listed[f"{size} first"]),
                                      "middle_page": summary(listed[f"{size} middle"])}
    progress("lists done")

    usage: dict[int, Any] = {}
    calls: dict[str, tuple[int, Request]] = {}
    for size in RESPONSE_SIZES:
        check = await fetch(stack, response_in(stack, conversations[size], size, keep=True))
        usage[size] = (check.json().get("usage") or {}).get("input_tokens") if check.status == 200 else None
        calls[f"{size} stack"] = (stack, response_in(stack, conversations[size], size))
        calls[f"{size} upstream"] = (upstream, upstream_chat(upstream, size))
    with profiling(options.profile_dir, "responses", stack_pid):
        answered = await sample_interleaved(calls, options.response_requests, LATENCY_WARMUP, ROUNDS)
    for size in RESPONSE_SIZES:
        results["responses"][str(size)] = {
            "stack": summary(answered[f"{size} stack"]), "upstream": summary(answered[f"{size} upstream"]),
            "expected_input_tokens": expected_tokens(size), "input_tokens": usage[size],
            "items_after": len(await item_ids(stack, conversations[size])),
        }
    progress("responses done")
    return results


# ---------------------------------------------------------------------------------------------
# Report


def ms(value: float) -> str:
    return f"{value:.2f} ms"


def list_report(results: dict[str, Any]) -> str:
    rows: list[Row] = [(f"GET .../items?limit={PAGE}, c=1", "first page p50", "p99", "middle page p50", "p99",
                        "errors", "target")]
    by_size = results["list"]
    for size, measured in by_size.items():
        first, deep = measured["first_page"], measured["middle_page"]
        mark = ""
        if int(size) == max(LIST_SIZES):
            worst = max(first["p50_ms"], deep["p50_ms"])
            mark = f"p50 < {TARGET_LIST_P50_MS:g} ms  {verdict(worst < TARGET_LIST_P50_MS)}"
        rows.append((f"{int(size):,} items", ms(first["p50_ms"]), ms(first["p99_ms"]), ms(deep["p50_ms"]),
                     ms(deep["p99_ms"]), str(first["errors"] + deep["errors"]), mark))
    lines = [table(rows)]
    big, mid = by_size.get(str(max(LIST_SIZES))), by_size.get("1000")
    if big and mid:
        ratios = [big[page]["p50_ms"] / mid[page]["p50_ms"] for page in ("first_page", "middle_page")]
        lines.append(f"flat: p50 at {max(LIST_SIZES):,} / at 1,000 items: first page x{ratios[0]:.2f}, "
                     f"middle page x{ratios[1]:.2f}  (target <= x{TARGET_FLAT_RATIO:g}: "
                     f"{verdict(max(ratios) <= TARGET_FLAT_RATIO)}; the 10-item pages hold 10 items, not {PAGE})")
    return "\n".join(lines)


def responses_report(results: dict[str, Any]) -> str:
    rows: list[Row] = [("POST /v1/responses in a conversation, c=1", "upstream p50", "stack p50", "added",
                        "stack p99", "input_tokens", "items after", "check")]
    for size, measured in results["responses"].items():
        st, up = measured["stack"], measured["upstream"]
        expected, got = measured["expected_input_tokens"], measured["input_tokens"]
        good = got == expected and st["errors"] == 0 and up["errors"] == 0 and measured["items_after"] == int(size)
        rows.append((f"{int(size):,} items", ms(up["p50_ms"]), ms(st["p50_ms"]), f"{st['p50_ms'] - up['p50_ms']:+.2f} ms",
                     ms(st["p99_ms"]), f"{got} (expected {expected})", str(measured["items_after"]),
                     "OK" if good else f"MISMATCH ({st['errors']}/{up['errors']} err)"))
    return table(rows)


# ---------------------------------------------------------------------------------------------
# Entry point


def parse_args() -> Options:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=500, help="c=1 list requests per page and size (after 50 warm-up)")
    parser.add_argument("--response-requests", type=int, default=200,
                        help="c=1 responses per conversation size, and as many to the upstream alone")
    parser.add_argument("--setup-concurrency", type=int, default=8, help="appends in flight while building")
    parser.add_argument("--json", type=Path, dest="json_path", help="also write the numbers here")
    parser.add_argument("--py-spy", type=Path, dest="profile_dir", metavar="DIR",
                        help="record the stack server with py-spy during each measurement, into DIR/<name>.txt")
    args = parser.parse_args()
    return Options(args.requests, args.response_requests, args.setup_concurrency, args.json_path, args.profile_dir)


def main() -> None:
    options = parse_args()
    run = run_with_servers(RUN_YAML, "conversations", lambda servers: run_bench(options, servers))
    results, load, began = run.results, run.load, time.perf_counter() - run.seconds
    if options.json_path is not None:
        write_results(options.json_path, options, run)
    print(f"conversations: items of {ITEM_TOKENS} tokens ({ITEM_TEXT!r}); stack on core {STACK_CORE}; "
          f"fake upstream and this load generator on core {CLIENT_CORE}")
    print(f"c=1: {options.requests} list requests / {options.response_requests} responses after "
          f"{LATENCY_WARMUP} warm-up")
    print()
    print(list_report(results))
    print()
    print(responses_report(results))
    print(f"\nload average (1 min) before/after: {load[0]:.2f}/{load[1]:.2f}; "
          f"took {time.perf_counter() - began:.0f} s")


if __name__ == "__main__":
    main()
