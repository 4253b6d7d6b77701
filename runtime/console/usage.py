"""The usage page (`/console/usage`): requests, tokens and errors over the last hour, day, week or
month, by model or (for an operator) by principal, as stacked bar charts drawn on the server (SVG,
no script) with a table of totals. A principal who is not an operator sees its own usage only.
The counts come from run.yaml `server.usage` (runtime.security.usage), kept across restarts."""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from starlette.responses import Response

from runtime.console.page import Page
from runtime.security.usage import OTHER, UsageRow

__all__ = ["ROUTES", "Chart", "charts"]

RANGES = {"1h": (60, 1), "24h": (1440, 60), "7d": (7 * 1440, 180), "30d": (30 * 1440, 1440), "90d": (90 * 1440, 3 * 1440)}
"""A range's span and the size of its buckets, in minutes (60 or fewer bars; days are UTC days)."""
TOP = 6  # groups drawn in their own colour; the rest are one, "other"
PALETTE = ("#0b5cad", "#e07b00", "#2e8540", "#8e44ad", "#c0392b", "#16a085", "#7f8c8d")
WIDTH, HEIGHT = 720, 140
_MEASURES: dict[str, Callable[[Any], int]] = {
    "requests": lambda row: row.requests,
    "tokens": lambda row: row.input_tokens + row.output_tokens,
    "errors": lambda row: row.client_errors + row.server_errors,
}


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    color: str
    title: str


@dataclass
class Chart:
    """One measure's stacked bars, and the labels of its axes."""

    name: str
    top: int
    bars: list[Bar] = field(default_factory=list)


@dataclass(frozen=True)
class Group:
    """A model or principal's totals over the range, and its colour in the charts."""

    label: str
    color: str
    totals: UsageRow


async def usage(page: Page) -> Response:
    ledger = page.console.context.usage
    if ledger is None:
        return page.render("usage.html", off=True, groups=[], charts=[], range="24h", by="model", ranges=RANGES, first="", last="")
    span = page.request.query_params.get("range", "24h")
    span = span if span in RANGES else "24h"
    by = "principal" if page.request.query_params.get("by") == "principal" and page.operator else "model"
    minutes, bucket = RANGES[span]
    first = (int(time.time()) // 60 - minutes) // bucket * bucket + bucket
    mine = None if page.operator else (page.session.principal.id if page.session.principal is not None else "")
    totals = await ledger.totals(first, by, principal=mine)
    rows = await ledger.series(first, bucket, by, [getattr(row, by) for row in totals[:TOP]], principal=mine)
    groups, drawn = charts(totals, rows, by, first, bucket, minutes // bucket)
    return page.render("usage.html", off=False, groups=groups, charts=drawn, range=span, by=by, ranges=RANGES,
                       first=_when(first), last=_when(first + minutes))


def charts(totals: Sequence[UsageRow], rows: Iterable[UsageRow], by: str, first: int, bucket: int,
           count: int) -> tuple[list[Group], list[Chart]]:
    """The groups (as `totals` ranks them, those past the top in one colour, "other") and a
    stacked bar chart per measure of `rows` (`UsageLedger.series`), `count` buckets of `bucket`
    minutes from minute `first` on."""
    colour = {getattr(row, by): PALETTE[min(at, TOP)] for at, row in enumerate(totals)}
    colour[OTHER] = PALETTE[TOP]
    groups = [Group(_label(getattr(row, by), by), colour[getattr(row, by)], row) for row in totals]
    rows = list(rows)
    drawn = [_chart(name, measure, rows, by, colour, first, bucket, count) for name, measure in _MEASURES.items()]
    return groups, drawn


def _chart(name: str, measure: Callable[[Any], int], rows: list[Any], by: str, colour: dict[str, str], first: int, bucket: int,
           count: int) -> Chart:
    stacks: dict[int, dict[str, int]] = {}
    for row in rows:
        at = (row.bucket - first) // bucket
        if 0 <= at < count and (value := measure(row)):
            stack = stacks.setdefault(at, {})
            key = colour.get(getattr(row, by), PALETTE[TOP])  # the groups past the top share "other"'s colour and segment
            stack[key] = stack.get(key, 0) + value
    top = max((sum(stack.values()) for stack in stacks.values()), default=0)
    chart = Chart(name, top)
    if not top:
        return chart
    width = WIDTH / count
    for at, stack in sorted(stacks.items()):
        y = float(HEIGHT)
        for color in PALETTE:
            value = stack.get(color, 0)
            if value:
                height = HEIGHT * value / top
                y -= height
                chart.bars.append(Bar(round(at * width + 1, 1), round(y, 1), round(max(width - 2, 1), 1), round(height, 1), color,
                                      f"{_when(first + at * bucket)}: {value:,} {name}"))
    return chart


def _label(name: str, by: str) -> str:
    if name:
        return name
    return "(no model)" if by == "model" else "(no principal: auth off)"


def _when(minute: int) -> str:
    return datetime.datetime.fromtimestamp(minute * 60, datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")


ROUTES = [("/usage", usage, ["GET"])]
