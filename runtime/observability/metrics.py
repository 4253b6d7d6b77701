"""Prometheus metrics, off unless run.yaml's `server.metrics` is set: counted in plain Python on
the request path, exposed in Prometheus' text format by the official client library.

One set per app (two stacks in one process count apart). The app's one middleware
(runtime.http.middleware.RequestGuard) counts requests by route template, method and status, times them
to their last byte (a stream's end included), and keeps the number of open streams; the parts of
the stack that see more record into the app's metrics through `current_metrics()` (a context
variable the middleware sets, so code reached without metrics pays one lookup): the inference router its upstream latency, time to
first token and tokens by provider and model, the tool loop its tool calls, the background runner
its queue. In a worker of `stack run --workers N`, a scrape answers the sum of every worker's
(runtime.observability.worker_metrics).
"""

from __future__ import annotations

import bisect
import contextvars
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from starlette.types import Scope

__all__ = ["CONTENT_TYPE", "Metrics", "Snapshot", "current_metrics", "merged", "route_template", "usage_counts"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"  # Prometheus' text format

_FOLD_EVERY = 256
"""Requests and model calls observed before they are counted, in one batch (see `Metrics`)."""

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)

Snapshot = dict[str, dict[str, Any]]
"""A set of metrics' values as JSON (`Metrics.snapshot`): `counters`, `histograms` and `gauges`,
each by metric name."""


class _Counter:
    """A counter by label values: a dict increment on the request path (the client library's
    own metric objects take a lock and several calls per update: about 40 µs a request here)."""

    def __init__(self, name: str, help: str, labels: tuple[str, ...]) -> None:
        self.name, self.help, self.labels = name, help, labels
        self.values: dict[tuple[str, ...], float] = {}

    def inc(self, labels: tuple[str, ...], amount: float = 1) -> None:
        self.values[labels] = self.values.get(labels, 0) + amount

    def dump(self) -> list[Any]:
        return [[list(labels), value] for labels, value in self.values.items()]

    def add(self, dumped: Iterable[Any]) -> None:
        for labels, value in dumped:
            self.inc(tuple(labels), value)

    def family(self) -> Any:
        from prometheus_client.core import CounterMetricFamily

        family = CounterMetricFamily(self.name, self.help, labels=self.labels)
        for labels, value in list(self.values.items()):
            family.add_metric(labels, value)
        return family


class _Histogram:
    def __init__(self, name: str, help: str, labels: tuple[str, ...], buckets: tuple[float, ...] = _LATENCY_BUCKETS) -> None:
        self.name, self.help, self.labels, self.bounds = name, help, labels, buckets
        self.values: dict[tuple[str, ...], tuple[list[int], list[float]]] = {}

    def observe(self, labels: tuple[str, ...], value: float) -> None:
        found = self.values.get(labels)
        if found is None:
            found = self.values[labels] = ([0] * (len(self.bounds) + 1), [0.0])
        found[0][bisect.bisect_left(self.bounds, value)] += 1  # the first bucket whose bound is >= value
        found[1][0] += value

    def dump(self) -> list[Any]:
        return [[list(labels), list(counts), total[0]] for labels, (counts, total) in self.values.items()]

    def add(self, dumped: Iterable[Any]) -> None:
        for labels, counts, total in dumped:
            if len(counts) != len(self.bounds) + 1:
                continue  # another set of buckets: not this histogram's
            found = self.values.get(key := tuple(labels))
            if found is None:
                found = self.values[key] = ([0] * (len(self.bounds) + 1), [0.0])
            for at, count in enumerate(counts):
                found[0][at] += count
            found[1][0] += total

    def family(self) -> Any:
        from prometheus_client.core import HistogramMetricFamily

        family = HistogramMetricFamily(self.name, self.help, labels=self.labels)
        for labels, (counts, total) in list(self.values.items()):
            cumulative, buckets = 0, []
            for bound, count in zip((*map(str, self.bounds), "+Inf"), counts, strict=True):
                cumulative += count
                buckets.append((bound, cumulative))
            family.add_metric(labels, buckets, total[0])
        return family


class _Gauge:
    def __init__(self, name: str, help: str) -> None:
        self.name, self.help, self.value = name, help, 0.0

    def inc(self) -> None:
        self.value += 1

    def dec(self) -> None:
        self.value -= 1

    def set(self, value: float) -> None:
        self.value = value

    def dump(self) -> float:
        return self.value

    def add(self, dumped: float) -> None:
        self.value += dumped

    def family(self) -> Any:
        from prometheus_client.core import GaugeMetricFamily

        return GaugeMetricFamily(self.name, self.help, value=self.value)


class Metrics:
    """The app's metrics: plain counters, turned into Prometheus' text format by the client
    library when scraped (this object is the registry's collector).

    A request, and a whole (not streamed) model call, only leave their facts in a list on the
    request path; every `_FOLD_EVERY` of them, and at each scrape, the list is counted in one
    batch: done in a row, the counting costs a fraction of what it costs done in each request
    (where its code and data are no longer in the CPU's caches), as with the access log."""

    def __init__(self) -> None:
        self.requests = _Counter("stack_requests", "HTTP requests answered", ("route", "method", "status"))
        self.request_seconds = _Histogram("stack_request_duration_seconds", "Time to a request's last byte", ("route", "method"))
        self.open_streams = _Gauge("stack_open_streams", "Streamed answers (SSE) under way")
        self.upstream_seconds = _Histogram("stack_upstream_duration_seconds", "Time of a model call, to its last byte",
                                           ("provider", "model", "kind"))
        self.first_token_seconds = _Histogram("stack_upstream_time_to_first_token_seconds", "Time to a streamed model call's first chunk",
                                              ("provider", "model"))
        self.tokens = _Counter("stack_tokens", "Tokens upstreams report", ("provider", "model", "direction"))
        self.tool_calls = _Counter("stack_tool_calls", "Server-side tool calls run", ("type", "outcome"))
        self.tool_calls_repeated = _Counter("stack_tool_calls_repeated", "Server-side calls a model made again with the same "
                                            "arguments in one response, not run again", ("tool_type",))
        self.background_queue = _Gauge("stack_background_queue", "Background responses queued or running in this process")
        # A model's deployments (runtime.apis.inference.deployments): outcome ok, or the failure's cause.
        self.deployment_attempts = _Counter("stack_deployment_attempts", "Attempts of a model's requests on its deployments",
                                            ("model", "deployment", "outcome"))
        self.deployment_first_byte_seconds = _Histogram("stack_deployment_first_byte_seconds", "Time to a deployment's first byte",
                                                        ("model", "deployment"))
        self.deployment_ejections = _Counter("stack_deployment_ejections", "Circuits opened (a deployment left alone for a cooldown)",
                                             ("model", "deployment"))
        self.fallbacks = _Counter("stack_model_fallbacks", "Requests answered by a fallback model", ("model", "fallback", "reason"))
        self._requests_seen: list[tuple[Any, str, str, int, float]] = []
        self._calls_seen: list[tuple[str, str, str, float, bytes | dict[str, int] | None]] = []
        self._all = (self.requests, self.request_seconds, self.open_streams, self.upstream_seconds, self.first_token_seconds,
                     self.tokens, self.tool_calls, self.tool_calls_repeated, self.background_queue, self.deployment_attempts,
                     self.deployment_first_byte_seconds, self.deployment_ejections, self.fallbacks)
        self.gather: Callable[[], Awaitable[bytes]] | None = None
        """Set in a worker of `stack run --workers N`: what a scrape answers instead of these
        metrics alone, the whole server's (runtime.observability.worker_metrics)."""

    def collect(self) -> Any:
        self.fold()
        for metric in self._all:
            yield metric.family()

    def exposition(self) -> bytes:
        # Imported here: a stack without metrics does not load the library at all.
        from prometheus_client import CollectorRegistry, generate_latest

        registry = CollectorRegistry(auto_describe=False)
        registry.register(self)
        return generate_latest(registry)

    async def scrape(self) -> bytes:
        """What the metrics route answers: these metrics, or the whole server's (`gather`)."""
        return self.exposition() if self.gather is None else await self.gather()

    def snapshot(self) -> Snapshot:
        """Every value counted so far, as JSON."""
        self.fold()
        kinds: Snapshot = {"counters": {}, "histograms": {}, "gauges": {}}
        for metric in self._all:
            kinds[_KINDS[type(metric)]][metric.name] = metric.dump()
        return kinds

    def add(self, snapshot: Mapping[str, Mapping[str, Any]]) -> None:
        """Add another set's values (a `snapshot`) to these; metrics this set does not have are left out."""
        for metric in self._all:
            dumped = snapshot.get(_KINDS[type(metric)], {}).get(metric.name)
            if dumped is not None:
                metric.add(dumped)

    # --- what runtime.http.middleware.RequestGuard calls, request by request -----------------------

    def enter(self) -> contextvars.Token[Metrics | None]:
        """Make these the metrics of the request being served (`current_metrics`)."""
        return _current.set(self)

    def leave(self, entered: contextvars.Token[Metrics | None] | None) -> None:
        if entered is not None:
            _current.reset(entered)

    def stream_started(self, headers: Any) -> bool:
        """Whether a response that starts with `headers` is a stream (counted open until it ends)."""
        for name, value in headers:
            if name == b"content-type":
                if value.startswith(b"text/event-stream"):
                    self.open_streams.inc()
                    return True
                return False
        return False

    def request_done(self, scope: Scope, status: int, streaming: bool, seconds: float) -> None:
        if streaming:
            self.open_streams.dec()
        seen = self._requests_seen
        seen.append((scope.get("route"), scope["path"], scope["method"], status, seconds))
        if len(seen) >= _FOLD_EVERY:
            self.fold()

    def call_done(self, provider: str, model: str, kind: str, seconds: float, answer: bytes | dict[str, int]) -> None:
        """A whole model call's time and its tokens: from its `answer`'s bytes, or the counts a caller
        already read from them (`usage_counts`: the bytes are then not scanned twice)."""
        seen = self._calls_seen
        if isinstance(answer, dict):
            seen.append((provider, model, kind, seconds, answer))
        else:
            at = answer.rfind(b'"usage"')
            seen.append((provider, model, kind, seconds, answer[at:] if at >= 0 else None))  # the usage's bytes only
        if len(seen) >= _FOLD_EVERY:
            self.fold()

    def fold(self) -> None:
        """Count what requests and model calls have left since the last fold."""
        requests, self._requests_seen = self._requests_seen, []
        for route, path, method, status, seconds in requests:
            template = _template(route, path)
            self.requests.inc((template, method, str(status)))
            self.request_seconds.observe((template, method), seconds)
        calls, self._calls_seen = self._calls_seen, []
        for provider, model, kind, seconds, usage in calls:
            self.upstream_seconds.observe((provider, model, kind), seconds)
            if usage is not None:
                self.record_usage(provider, model, usage if isinstance(usage, dict) else usage_counts(usage))

    def record_usage(self, provider: str, model: str, usage: Any) -> None:
        if not isinstance(usage, dict):
            return
        for direction, key in (("in", "prompt_tokens"), ("out", "completion_tokens")):
            count = usage.get(key)
            if isinstance(count, int) and count > 0:
                self.tokens.inc((provider, model, direction), count)


_KINDS: dict[type, str] = {_Counter: "counters", _Histogram: "histograms", _Gauge: "gauges"}


def merged(snapshots: Iterable[Mapping[str, Mapping[str, Any]]]) -> Metrics:
    """The sum of several sets of metrics (counters, histograms and gauges alike), such as the
    workers' of one server."""
    total = Metrics()
    for snapshot in snapshots:
        total.add(snapshot)
    return total


_current: contextvars.ContextVar[Metrics | None] = contextvars.ContextVar("metrics", default=None)


def current_metrics() -> Metrics | None:
    """The metrics of the app serving the current request (None when metrics are off)."""
    return _current.get()


_USAGE_FIELD = re.compile(rb'"(prompt_tokens|completion_tokens|total_tokens)"\s*:\s*(\d+)')
_USAGE_NAMES = {b"prompt_tokens": "prompt_tokens", b"completion_tokens": "completion_tokens", b"total_tokens": "total_tokens"}


def usage_counts(body: bytes) -> dict[str, int]:
    """The token counts of the last `usage` in a JSON answer's bytes (a regex scan from there: the
    answer itself is passed on unparsed). Nested counts (`*_tokens_details`) have other names."""
    at = body.rfind(b'"usage"')
    return {_USAGE_NAMES[name]: int(value) for name, value in _USAGE_FIELD.findall(body, at)} if at >= 0 else {}


def route_template(scope: Scope) -> str:
    """The matched route's path template as the client addressed it. FastAPI includes routers by
    reference, so the route knows its path without the prefix it was included under (`/v1`):
    the prefix is what the request path has before the template's fixed start."""
    return _template(scope.get("route"), scope["path"])


def _template(route: Any, requested: str) -> str:
    path = getattr(route, "path", None)
    if not isinstance(path, str):
        return "unmatched"
    fixed = path.split("{", 1)[0]
    at = requested.find(fixed) if fixed else 0
    return requested[:at] + path if at > 0 else path
