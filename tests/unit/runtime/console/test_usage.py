"""The usage page's charts: stacked bars per bucket, groups ranked by requests, the rest as "other"."""

from __future__ import annotations

from runtime.console.usage import HEIGHT, PALETTE, TOP, charts
from runtime.security.usage import OTHER, UsageRow


def row(bucket: int, principal: str, model: str, requests: int, tokens: int = 0, errors: int = 0) -> UsageRow:
    return UsageRow(bucket, principal, model, requests, tokens, 0, errors, 0)


def test_groups_rank_by_requests_and_bars_stack_to_the_tallest() -> None:
    rows = [row(100, "", "big", 8, 80), row(100, "", "small", 2, 20, errors=1), row(110, "", "big", 5)]
    totals = [row(100, "", "big", 13, 80), row(100, "", "small", 2, 20, errors=1)]
    groups, drawn = charts(totals, rows, "model", first=100, bucket=10, count=6)
    assert [(g.label, g.totals.requests, g.totals.input_tokens, g.totals.client_errors) for g in groups] == [("big", 13, 80, 0), ("small", 2, 20, 1)]
    requests = next(chart for chart in drawn if chart.name == "requests")
    assert requests.top == 10  # the first bucket: 8 + 2
    first = [bar for bar in requests.bars if bar.x < 120]
    assert [bar.color for bar in first] == [PALETTE[0], PALETTE[1]] and sum(bar.height for bar in first) == HEIGHT
    assert [bar.height for bar in requests.bars if bar.x >= 120] == [HEIGHT * 5 / 10]
    errors = next(chart for chart in drawn if chart.name == "errors")
    assert errors.top == 1 and [bar.title.endswith("1 errors") for bar in errors.bars] == [True]


def test_groups_past_the_top_share_one_colour_and_one_segment() -> None:
    totals = [row(0, f"p{n}", "", 100 - n) for n in range(TOP + 3)]
    rows = [*totals[:TOP], row(0, OTHER, "", 3 * 90)]  # as the ledger's series gives them
    groups, drawn = charts(totals, rows, "principal", first=0, bucket=1, count=60)
    assert [g.color for g in groups[TOP:]] == [PALETTE[TOP]] * 3
    assert [bar.color for bar in drawn[0].bars] == list(PALETTE)


def test_no_rows_no_bars_and_an_unnamed_group_says_what_it_is() -> None:
    assert all(not chart.bars and chart.top == 0 for chart in charts([], [], "model", 0, 1, 60)[1])
    groups, _ = charts([row(0, "", "", 1)], [], "principal", 0, 1, 60)
    assert groups[0].label == "(no principal: auth off)"
