"""The operator's page (`/console/operate`): providers and models with their health (and each
deployment's state), database keys (created, shown once, revoked) when run.yaml turns them on, and
the server's own counts from its metrics. Only for a principal an access policy lets read every
owner's objects, or for everyone when auth is off; anyone else gets a 404, as for an object not theirs."""

from __future__ import annotations

import time
from typing import Any

from starlette.responses import JSONResponse, Response

from runtime.console.page import SECURITY_HEADERS, Page

__all__ = ["ROUTES", "sampled"]


async def _admitted(page: Page) -> bool:
    return page.operator


def _not_found(page: Page) -> Response:
    return page.render("error.html", status=404, status_code=404, message="No such page.")


async def operate(page: Page) -> Response:
    if not await _admitted(page):
        return _not_found(page)
    return await _show(page, created=None)


async def create_key(page: Page) -> Response:
    keys = page.console.context.keys
    if not await _admitted(page) or keys is None:
        return _not_found(page)
    form = await page.request.form()
    principal = str(form.get("principal") or "").strip()
    if not principal:
        return page.render("error.html", status=400, status_code=400, message="A key needs the principal it stands for.")
    key, record = await keys.create(principal, {}, str(form.get("name") or "") or None)
    return await _show(page, created={"key": key, **record})


async def revoke_key(page: Page) -> Response:
    keys = page.console.context.keys
    if not await _admitted(page) or keys is None:
        return _not_found(page)
    await keys.revoke(page.request.path_params["key_id"])
    return await _show(page, created=None)


async def _show(page: Page, created: dict[str, Any] | None) -> Response:
    _, providers = await page.api("GET", "/providers")
    _, health = await page.api("GET", "/health")
    keys = page.console.context.keys
    listed = await keys.list() if keys is not None else None
    scrape = page.console.context.metrics
    exposition = await scrape() if scrape is not None else None
    counts = _counts(exposition) if exposition is not None else None
    latency = _latency(exposition) if exposition is not None else None
    routed = {name: state for name, state in ((health or {}).get("providers") or {}).items() if isinstance(state, dict) and "deployments" in state}
    return page.render("operate.html", providers=(providers or {}).get("data") or [], health=health or {}, keys=listed,
                       created=created, counts=counts, latency=latency, routed=routed, live=scrape is not None)


async def live(page: Page) -> Response:
    """The counts the live view turns into rates and percentiles, read again every few seconds:
    API requests and their server errors, and the request time and the first token's time as
    cumulative histogram buckets summed over routes and models."""
    scrape = page.console.context.metrics
    if not await _admitted(page) or scrape is None:
        return _not_found(page)
    return JSONResponse(sampled(await scrape(), time.time()), headers=SECURITY_HEADERS)


def sampled(exposition: bytes, now: float) -> dict[str, Any]:
    from prometheus_client.parser import text_string_to_metric_families

    requests = errors = 0.0
    buckets: dict[str, dict[float, float]] = {"duration": {}, "first_token": {}}
    for family in text_string_to_metric_families(exposition.decode()):
        for sample in family.samples:
            if not str(sample.labels.get("route", "/v1/")).startswith("/v1/"):
                continue  # the console's own pages and /metrics are not the traffic watched
            if sample.name == "stack_requests_total":
                requests += sample.value
                errors += sample.value if str(sample.labels.get("status", "")).startswith("5") else 0
            elif sample.name in ("stack_request_duration_seconds_bucket", "stack_upstream_time_to_first_token_seconds_bucket"):
                kind = "duration" if sample.name.startswith("stack_request") else "first_token"
                bound = float(sample.labels["le"])
                buckets[kind][bound] = buckets[kind].get(bound, 0.0) + sample.value
    return {"t": now, "requests": requests, "server_errors": errors,
            **{kind: [[None if bound == float("inf") else bound, count] for bound, count in sorted(found.items())]
               for kind, found in buckets.items()}}


def _latency(exposition: bytes) -> list[tuple[str, str, int, str, str]]:
    """Since start, by histogram: each route's (and each model's first token's) count and the bucket
    bounds its p50 and p99 fall under."""
    from prometheus_client.parser import text_string_to_metric_families

    wanted = {"stack_request_duration_seconds": ("route", "method"), "stack_upstream_time_to_first_token_seconds": ("provider", "model")}
    buckets: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for family in text_string_to_metric_families(exposition.decode()):
        if family.name not in wanted:
            continue
        for sample in family.samples:
            if sample.name.endswith("_bucket"):
                key = (family.name, " ".join(str(sample.labels.get(name, "")) for name in wanted[family.name]))
                buckets.setdefault(key, []).append((float(sample.labels["le"]), sample.value))
    rows = []
    for (name, label), bounds in buckets.items():
        bounds.sort()
        total = bounds[-1][1]
        if total:
            rows.append(("request" if name == "stack_request_duration_seconds" else "first token", label, int(total),
                         _under(bounds, total * 0.5), _under(bounds, total * 0.99)))
    return sorted(rows, key=lambda row: -row[2])[:30]


def _under(bounds: list[tuple[float, float]], rank: float) -> str:
    bound = next(le for le, count in bounds if count >= rank)
    return "> last bucket" if bound == float("inf") else f"≤ {bound * 1000:g} ms"


def _counts(exposition: bytes) -> dict[str, list[tuple[str, float]]]:
    """The counters worth a glance: requests by route and status, tokens by model, model calls by provider."""
    from prometheus_client.parser import text_string_to_metric_families

    wanted = {"stack_requests_total": ("route", "status"), "stack_tokens_total": ("model", "direction"),
              "stack_deployment_attempts_total": ("deployment", "outcome")}
    found: dict[str, list[tuple[str, float]]] = {name: [] for name in wanted}
    for family in text_string_to_metric_families(exposition.decode()):
        for sample in family.samples:
            if sample.name in wanted:
                label = " ".join(str(sample.labels.get(name, "")) for name in wanted[sample.name])
                found[sample.name].append((label, sample.value))
    return {name: sorted(rows, key=lambda row: -row[1])[:30] for name, rows in found.items()}


ROUTES = [("/operate", operate, ["GET"]), ("/operate/live", live, ["GET"]), ("/operate/keys", create_key, ["POST"]), ("/operate/keys/{key_id}/revoke", revoke_key, ["POST"])]
