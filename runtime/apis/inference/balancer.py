"""The deployments of one model, and which of them takes the next attempt of a request.

Each deployment keeps what this process has seen of it: requests in flight, an EWMA of the time to
its first byte, and a circuit breaker. The breaker is closed while it answers; `failures_to_open`
failures in a row open it for a cooldown, after which it is half-open: one request (a probe) goes
to it, and its answer closes the circuit or opens it again for twice as long (up to
`max_cooldown_s`). A 429 with `retry-after` rests the deployment for that long without counting
as a failure. Workers and replicas each keep their own view: nothing here is shared.

Strategies pick among the deployments that may take a request (closed, or half-open with no probe
out; under `max_concurrency`; not yet tried by this request):

    least_outstanding   the fewest requests in flight for its weight (ties: the one picked longest ago)
    round_robin         smooth weighted round robin (nginx's): each in turn, in proportion to its weight
    latency             power of two choices: two drawn at random by weight, the one whose EWMA time
                        to first byte times its load is lower (one never measured counts as fastest,
                        so it gets measured; two draws, so a recovered one is not flooded)
    prefix_affinity     the deployment that last served the longest prefix of this prompt (its KV cache
                        holds it), unless it has `affinity_imbalance` more in flight than the least
                        busy; otherwise least_outstanding. Prefixes are hashed per message (the system
                        prompt and the conversation so far) into a bounded index, least recently used
                        forgotten.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from builder.models import DeploymentConfig, RoutingConfig
from contract import fastjson

__all__ = ["Balancer", "Deployment", "prefix_keys"]

_EWMA_WEIGHT = 0.3


@dataclass(eq=False)
class Deployment:
    """One deployment and what this process has seen of it."""

    provider_id: str
    model: str
    """The upstream's name for the model."""
    weight: float = 1.0
    max_concurrency: int | None = None
    tags: tuple[str, ...] = ()
    in_flight: int = 0
    ewma_s: float | None = None
    failures: int = 0
    """Failures in a row."""
    state: str = "closed"
    open_until: float = 0.0
    cooldown_s: float = 0.0
    probing: bool = False
    rest_until: float = 0.0
    """A 429's `retry-after`: not sent to until then."""
    rpm: int | None = None
    tpm: int | None = None
    minute: float = 0.0
    """When its current minute of rpm/tpm counting began."""
    minute_requests: int = 0
    minute_tokens: int = 0
    requests: int = 0
    errors: int = 0
    last_error: str | None = None
    picked: int = 0
    current_weight: float = field(default=0.0, repr=False)

    @property
    def name(self) -> str:
        return f"{self.provider_id}/{self.model}"

    def view(self, now: float) -> dict[str, Any]:
        """Its state, for /v1/health."""
        state = "half_open" if self.state == "open" and now >= self.open_until else self.state
        return {"provider_id": self.provider_id, "model": self.model, "weight": self.weight, "tags": list(self.tags),
                "circuit": state, "in_flight": self.in_flight, "requests": self.requests, "errors": self.errors,
                "failures_in_a_row": self.failures, "ewma_first_byte_ms": None if self.ewma_s is None else round(self.ewma_s * 1000, 3),
                "resting_s": max(0.0, round(self.rest_until - now, 3)), "last_error": self.last_error,
                "minute": {"requests": self.minute_requests, "tokens": self.minute_tokens, "rpm": self.rpm, "tpm": self.tpm}}


def prefix_keys(body: Any) -> list[int]:
    """The hashes of a chat request's prefixes, one a message: each of the message's own and
    every earlier one's (the system prompt, then the conversation so far). A legacy completion's
    prompt is hashed in blocks of 512 characters, an embedding request not at all. Python's hash:
    the index lives in one process, as the hash's seed does."""
    keys: list[int] = []
    key = 0
    messages = body.get("messages") if isinstance(body, dict) else None
    if isinstance(messages, list):
        for message in messages:
            if not isinstance(message, dict):
                break
            content = message.get("content")
            key = hash((key, message.get("role"), content if isinstance(content, str) else fastjson.dumps(content)))
            keys.append(key)
        return keys
    prompt = body.get("prompt") if isinstance(body, dict) else None
    if isinstance(prompt, str):
        for start in range(0, len(prompt), 512):
            key = hash((key, prompt[start:start + 512]))
            keys.append(key)
    return keys


class Balancer:
    """The deployments of one model, its routing policy, and the picking of each attempt."""

    def __init__(self, model_id: str, deployments: Sequence[DeploymentConfig], routing: RoutingConfig,
                 clock: Callable[[], float] = time.monotonic, rng: random.Random | None = None) -> None:
        self.model_id = model_id
        self.routing = routing
        self.deployments = [Deployment(d.provider_id, d.provider_model_id or model_id, d.weight, d.max_concurrency, tuple(d.tags),
                                       rpm=d.rpm, tpm=d.tpm) for d in deployments]
        self._clock = clock
        self._random = rng or random.Random()
        self._turn = 0
        self._prefixes: dict[int, Deployment] = {}
        self._freed = asyncio.Event()
        # Only a deployment with a cap can make a request wait for another to end.
        self._capped = any(d.max_concurrency is not None for d in self.deployments)

    # --- picking --------------------------------------------------------------------------------

    def pick(self, tried: Sequence[Deployment], keys: Sequence[int] = ()) -> Deployment | None:
        """The deployment for the next attempt, counted in flight; None when none may take it now."""
        now = self._clock()
        open_ = [d for d in self.deployments if d not in tried and self._available(d, now)]
        if not open_:
            return None
        strategy = self.routing.strategy
        if strategy == "round_robin":
            chosen = self._round_robin(open_)
        elif strategy == "latency":
            chosen = self._latency(open_)
        elif strategy == "prefix_affinity":
            chosen = self._affinity(open_, keys)
        else:
            chosen = self._least_outstanding(open_)
        if chosen.state == "open":  # past its cooldown: this request is its probe
            chosen.probing = True
        chosen.in_flight += 1
        chosen.requests += 1
        chosen.minute_requests += 1
        self._turn += 1
        chosen.picked = self._turn
        if keys and strategy == "prefix_affinity":
            self._remember(keys, chosen)
        return chosen

    def _available(self, deployment: Deployment, now: float) -> bool:
        if deployment.rest_until > now:
            return False
        if (deployment.rpm is not None or deployment.tpm is not None) and not self._within_limits(deployment, now):
            return False
        if deployment.max_concurrency is not None and deployment.in_flight >= deployment.max_concurrency:
            return False
        if deployment.state == "open":
            return now >= deployment.open_until and not deployment.probing
        return True

    def _within_limits(self, deployment: Deployment, now: float) -> bool:
        """Under its rpm and tpm in the current minute (a fixed window, started by its first request)."""
        if now - deployment.minute >= 60:
            deployment.minute, deployment.minute_requests, deployment.minute_tokens = now, 0, 0
        if deployment.rpm is not None and deployment.minute_requests >= deployment.rpm:
            return False
        return deployment.tpm is None or deployment.minute_tokens < deployment.tpm

    def over_limits(self, deployment: Deployment) -> bool:
        """At its rpm or tpm in a minute not yet over."""
        if self._clock() - deployment.minute >= 60:
            return False
        return bool((deployment.rpm is not None and deployment.minute_requests >= deployment.rpm)
                    or (deployment.tpm is not None and deployment.minute_tokens >= deployment.tpm))

    def used_tokens(self, deployment: Deployment, tokens: int) -> None:
        """An answer's tokens (prompt and completion), counted against the deployment's tpm."""
        deployment.minute_tokens += tokens

    def _least_outstanding(self, candidates: Sequence[Deployment]) -> Deployment:
        chosen = candidates[0]
        load = chosen.in_flight / chosen.weight
        for deployment in candidates:  # a loop, not min() with a key: this runs on every request
            other = deployment.in_flight / deployment.weight
            if other < load or (other == load and deployment.picked < chosen.picked):
                chosen, load = deployment, other
        return chosen

    def _round_robin(self, candidates: Sequence[Deployment]) -> Deployment:
        total = 0.0
        for deployment in candidates:
            deployment.current_weight += deployment.weight
            total += deployment.weight
        chosen = max(candidates, key=lambda d: d.current_weight)
        chosen.current_weight -= total
        return chosen

    def _latency(self, candidates: Sequence[Deployment]) -> Deployment:
        if len(candidates) == 1:
            return candidates[0]
        first, second = self._random.choices(candidates, weights=[d.weight for d in candidates], k=2)
        if first is second:
            second = self._random.choice([d for d in candidates if d is not first])
        return min((first, second), key=lambda d: ((d.ewma_s or 0.0) * (d.in_flight + 1) / d.weight, d.picked))

    def _affinity(self, candidates: Sequence[Deployment], keys: Sequence[int]) -> Deployment:
        least = self._least_outstanding(candidates)
        for key in reversed(keys):
            held = self._prefixes.get(key)
            if held is not None:
                if held in candidates and held.in_flight <= least.in_flight + self.routing.affinity_imbalance:
                    return held
                break
        return least

    def _remember(self, keys: Sequence[int], deployment: Deployment) -> None:
        prefixes = self._prefixes
        for key in keys:
            prefixes.pop(key, None)  # to the end of the order: the most recently used
            prefixes[key] = deployment
        while len(prefixes) > self.routing.prefix_index_size:
            del prefixes[next(iter(prefixes))]

    async def wait_for_capacity(self, timeout: float) -> None:
        """Until a request in flight ends (a deployment may have room again), or `timeout`."""
        event = self._freed
        try:
            await asyncio.wait_for(event.wait(), timeout)
        except TimeoutError:
            pass

    def next_opening(self, tried: Sequence[Deployment]) -> float | None:
        """Seconds until a deployment not yet tried may take a request again (a circuit's cooldown
        or a 429's rest ending); None when none will (all tried)."""
        now = self._clock()
        times = [max(d.open_until if d.state == "open" else now, d.rest_until, d.minute + 60 if self.over_limits(d) else now) - now
                 for d in self.deployments if d not in tried]
        return max(0.0, min(times)) if times else None

    # --- outcomes -------------------------------------------------------------------------------

    def succeeded(self, deployment: Deployment, first_byte_s: float) -> None:
        """The attempt answered (its first byte after `first_byte_s`)."""
        deployment.ewma_s = first_byte_s if deployment.ewma_s is None else (
            _EWMA_WEIGHT * first_byte_s + (1 - _EWMA_WEIGHT) * deployment.ewma_s)
        deployment.failures = 0
        if deployment.state == "open":
            deployment.state, deployment.cooldown_s = "closed", 0.0
        deployment.probing = False

    def failed(self, deployment: Deployment, reason: str, retry_after_s: float | None = None) -> bool:
        """The attempt failed in a way another deployment may not (unreachable, timed out, 5xx,
        429). True when this opened its circuit (again)."""
        now = self._clock()
        deployment.errors += 1
        deployment.last_error = reason
        deployment.probing = False
        if retry_after_s is not None:  # a rate limit: rested, not counted against its health
            deployment.rest_until = now + retry_after_s
            return False
        deployment.failures += 1
        if deployment.state != "open" and deployment.failures < self.routing.failures_to_open:
            return False
        deployment.cooldown_s = min(deployment.cooldown_s * 2 if deployment.cooldown_s else self.routing.cooldown_s,
                                    self.routing.max_cooldown_s)
        deployment.state, deployment.open_until = "open", now + deployment.cooldown_s
        return True

    def checked(self, deployment: Deployment, error: str | None) -> None:
        """An active health check's outcome: an answer closes an open circuit; a failure counts as a request's."""
        if error is not None:
            self.failed(deployment, f"health check: {error}")
        elif deployment.state == "open":
            deployment.state, deployment.failures, deployment.cooldown_s, deployment.probing = "closed", 0, 0.0, False

    def released(self, deployment: Deployment) -> None:
        """The attempt is over (answered whole, failed, cancelled, or its stream ended)."""
        deployment.in_flight -= 1
        deployment.probing = False  # a probe cancelled before its outcome: the next request probes
        if self._capped:
            freed, self._freed = self._freed, asyncio.Event()
            freed.set()

    def view(self) -> dict[str, Any]:
        now = self._clock()
        return {"strategy": self.routing.strategy, "deployments": [d.view(now) for d in self.deployments],
                "prefixes": len(self._prefixes)}
