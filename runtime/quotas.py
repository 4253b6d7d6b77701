"""Per-principal quotas: requests per minute and tokens per minute (as upstreams report usage),
counted in fixed one-minute windows, in this process or in Redis when replicas share the limits.

`Quotas.admit` runs for every authenticated request (runtime/auth.py) and refuses with a 429 in
OpenAI's shape, with `retry-after` and `x-ratelimit-*` headers, once the principal's window is
spent. Token use is recorded where model answers pass (the inference router calls `spend_tokens`)
and counts against the window it falls in: the request that crosses the limit finishes, the next
ones are refused until the window ends. Fixed windows let a principal spend up to twice a limit
across a window boundary; the counting is one atomic increment per request.

A counter that cannot be reached (Redis down) refuses the request with a 503: limits are not
silently lifted.
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from builder.config import QuotaConfig, QuotaLimits
from runtime.errors import APIError, ServiceUnavailableError

__all__ = ["Quotas", "RateLimited", "meter_tokens", "reset_meter", "spend_tokens", "token_meter"]

WINDOW_S = 60
_TTL_S = 2 * WINDOW_S


class RateLimited(APIError):
    status_code = 429
    error_type = "requests"


class _Counter(Protocol):
    async def add(self, key: str, amount: int, read: str | None = None) -> tuple[int, int]:
        """Add `amount` to `key`; its new count, and the count of `read` (0 without one), at once."""
        ...


class _MemoryCounter:
    def __init__(self) -> None:
        self._counts: dict[str, tuple[float, int]] = {}

    async def add(self, key: str, amount: int, read: str | None = None) -> tuple[int, int]:
        now = time.monotonic()
        expires, count = self._counts.get(key, (now + _TTL_S, 0))
        self._counts[key] = (expires, count + amount)
        if len(self._counts) > 100_000:  # old windows: dropped
            self._counts = {k: v for k, v in self._counts.items() if v[0] > now}
        other = self._counts.get(read) if read is not None else None
        return count + amount, 0 if other is None else other[1]


class _RedisCounter:
    def __init__(self, url: str) -> None:
        import redis.asyncio

        self._redis = redis.asyncio.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
        self._errors: tuple[type[BaseException], ...] = (redis.RedisError, OSError)

    async def add(self, key: str, amount: int, read: str | None = None) -> tuple[int, int]:
        try:  # one round trip: the increment, its expiry and the other count in one transaction
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.incrby(key, amount)
                pipe.expire(key, _TTL_S)
                if read is not None:
                    pipe.get(read)
                answers = await pipe.execute()
            return int(answers[0]), int(answers[2] or 0) if read is not None else 0
        except self._errors as error:
            raise _down(error) from None

    async def aclose(self) -> None:
        await self._redis.aclose()


def _down(error: BaseException) -> ServiceUnavailableError:
    return ServiceUnavailableError(f"Quotas could not be checked (the quota store is unavailable: {type(error).__name__}); try again "
                                   "shortly.", code="quota_store_unavailable")


@dataclass(frozen=True)
class _Window:
    index: int
    reset_s: int


def _window() -> _Window:
    now = time.time()
    index = int(now // WINDOW_S)
    return _Window(index, max(1, int((index + 1) * WINDOW_S - now + 0.999)))


class Quotas:
    def __init__(self, config: QuotaConfig) -> None:
        self.config = config
        self.counter: _Counter = _RedisCounter(config.redis_url) if config.redis_url else _MemoryCounter()
        self._limits: dict[str, QuotaLimits] = {}

    def limits(self, principal: str) -> QuotaLimits:
        limits = self._limits.get(principal)
        if limits is None:
            own = self.config.principals.get(principal)
            limits = QuotaLimits(
                requests_per_minute=own.requests_per_minute if own and own.requests_per_minute else self.config.requests_per_minute,
                tokens_per_minute=own.tokens_per_minute if own and own.tokens_per_minute else self.config.tokens_per_minute)
            if len(self._limits) < 100_000:
                self._limits[principal] = limits
        return limits

    async def admit(self, principal: str) -> dict[str, str]:
        """Count a request; its `x-ratelimit-*` headers, or a 429 when a window is spent."""
        limits, window = self.limits(principal), _window()
        rpm, tpm = limits.requests_per_minute, limits.tokens_per_minute
        if rpm is None and tpm is None:
            return {}
        tokens_key = _key(principal, "t", window) if tpm is not None else None
        count, used = await self.counter.add(_key(principal, "r", window), 1, tokens_key)
        headers: dict[str, str] = {}
        if tpm is not None:
            if used >= tpm:
                raise _refused("tokens per min (TPM)", "tokens", tpm, used, window)
            headers |= {"x-ratelimit-limit-tokens": str(tpm), "x-ratelimit-remaining-tokens": str(tpm - used),
                        "x-ratelimit-reset-tokens": f"{window.reset_s}s"}
        if rpm is not None:
            if count > rpm:
                raise _refused("requests per min (RPM)", "requests", rpm, count - 1, window)
            headers |= {"x-ratelimit-limit-requests": str(rpm), "x-ratelimit-remaining-requests": str(rpm - count),
                        "x-ratelimit-reset-requests": f"{window.reset_s}s"}
        return headers

    def meter(self, principal: str) -> Callable[[int], Awaitable[None]] | None:
        """Where a request of `principal` records the tokens its model calls use (None: no token limit)."""
        if self.limits(principal).tokens_per_minute is None:
            return None

        async def spend(tokens: int) -> None:
            await self.spend(principal, tokens)

        return spend

    async def spend(self, principal: str, tokens: int) -> None:
        if tokens > 0 and self.limits(principal).tokens_per_minute is not None:
            await self.counter.add(_key(principal, "t", _window()), tokens)

    async def aclose(self) -> None:
        close = getattr(self.counter, "aclose", None)
        if close is not None:
            await close()


def _key(principal: str, kind: str, window: _Window) -> str:
    return f"stack:quota:{kind}:{window.index}:{principal}"


def _refused(what: str, kind: str, limit: int, used: int, window: _Window) -> RateLimited:
    error = RateLimited(f"Rate limit reached on {what}: Limit {limit}, Used {used}. Please try again in {window.reset_s}s.",
                        code="rate_limit_exceeded", headers={"retry-after": str(window.reset_s)})
    error.error_type = kind  # type: ignore[misc]  # OpenAI names the exhausted limit: requests or tokens
    return error


# --- token metering ----------------------------------------------------------------------------

_meter: contextvars.ContextVar[Callable[[int], Awaitable[None]] | None] = contextvars.ContextVar("token_meter", default=None)


def token_meter() -> Callable[[int], Awaitable[None]] | None:
    """Where the request being served records the tokens its model calls used (None: not metered)."""
    return _meter.get()


def meter_tokens(record: Callable[[int], Awaitable[None]] | None) -> contextvars.Token[Any]:
    return _meter.set(record)


def reset_meter(token: contextvars.Token[Any]) -> None:
    _meter.reset(token)


async def spend_tokens(usage: Any) -> None:
    """Record a chat or embeddings `usage` object against the current request's quota."""
    record = _meter.get()
    if record is None or not isinstance(usage, dict):
        return
    total = usage.get("total_tokens")
    if not isinstance(total, int):
        total = int(usage.get("prompt_tokens") or 0) + int(usage.get("completion_tokens") or 0)
    if total > 0:
        await record(total)
