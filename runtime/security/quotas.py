"""Per-principal quotas: requests per minute and tokens per minute (as upstreams report usage),
counted in fixed one-minute windows, in this process or in Redis when replicas share the limits.

`Quotas.admit` runs for every authenticated request (runtime/security/auth.py) and refuses with a 429 in
OpenAI's shape, with `retry-after` and `x-ratelimit-*` headers, once the principal's window is
spent. Token use is recorded where model answers pass (the inference router calls `spend_tokens`)
and counts against the window it falls in: the request that crosses the limit finishes, the next
ones are refused until the window ends. Fixed windows let a principal spend up to twice a limit
across a window boundary.

With Redis, a round trip per request (about 80 µs of CPU in redis-py even for one command) cost
several times the rest of a proxied request, so a process talks to Redis in batches:

- requests are taken from a lease: a process reserves a block of a principal's requests in one
  atomic step, never past the limit, and admits from it locally. The block doubles while leases
  are used up within 0.1 s (a busy principal: few round trips) and halves otherwise, and is at most
  1/100 of the limit (a limit under 200 a minute is counted one request per round trip, exactly).
  No replica ever admits past the limit; what a replica reserved and did not admit by the window's
  end (at most 1 % of the limit each) goes unused.
- tokens spent are sent within 0.05 s, with the next round trip or on their own; with a token
  limit, a count read more than 0.05 s ago is read again before a request is admitted. Another
  replica may so admit requests for up to 0.1 s after the limit is crossed, as the request that
  crosses it already finishes.

A counter that cannot be reached (Redis down) refuses the request with a 503: limits are not
silently lifted. Tokens that could not be sent are kept and sent with a later round trip, and when
the server stops.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

from builder.config import QuotaConfig, QuotaLimits
from contract.errors import APIError, ServiceUnavailableError

__all__ = ["Quotas", "RateLimited", "TokenMeter", "meter_tokens", "reset_meter", "spend_tokens", "token_meter", "usage_total"]

log = logging.getLogger("stack")

WINDOW_S = 60
_TTL_S = 2 * WINDOW_S
SEND_S = 0.05  # Redis: how long tokens spent wait to be sent, and how old a token count read may be
LEASE_SHARE = 100  # Redis: a lease is at most this fraction (1/LEASE_SHARE) of a request limit
_LEASE_FAST_S = 0.1  # a lease used up sooner than this doubles the next one; later, halves it
_RETRY_S = 1.0  # Redis down: how long tokens not sent wait before they are tried again


class RateLimited(APIError):
    status_code = 429
    error_type = "requests"


class _Tally:
    """One principal's counts in one window, as this process knows them."""

    __slots__ = ("requests", "tokens", "left", "unsent", "spent", "lease", "leased_at", "read_at", "syncing")

    def __init__(self) -> None:
        self.requests = 0  # counted in the window (Redis: reserved by every replica, each lease whole)
        self.tokens = 0  # counted in the window (Redis: as last read, with `unsent` still to add)
        self.left = 0  # Redis: requests this process reserved and has not admitted yet
        self.unsent = 0  # Redis: tokens spent here and not sent yet
        self.spent = False  # Redis: the window's requests are all reserved
        self.lease = 1
        self.leased_at = -math.inf
        self.read_at = -math.inf
        self.syncing: asyncio.Task[None] | None = None


class _Tallies(dict[tuple[str, int], _Tally]):
    """Tallies by (principal, window index); those of past windows are dropped as windows pass."""

    window = -1

    def of(self, principal: str, window: int) -> _Tally:
        tally = self.get((principal, window))
        if tally is None:
            if window > self.window:
                self.window = window
                for key in [key for key, old in self.items() if key[1] < window and not old.unsent and old.syncing is None]:
                    del self[key]
            tally = self[principal, window] = _Tally()
        return tally


class _Counter(Protocol):
    async def take(self, principal: str, window: int, rpm: int | None, tpm: int | None) -> tuple[bool, int, int]:
        """Admit one request of `principal` in `window` unless a limit is spent: whether it is
        admitted, then the requests (this one included) and the tokens counted in the window."""
        ...

    def spend(self, principal: str, window: int, tokens: int) -> None:
        """Count `tokens` in `window`."""
        ...

    async def aclose(self) -> None: ...


class _MemoryCounter:
    def __init__(self) -> None:
        self._tallies = _Tallies()

    async def take(self, principal: str, window: int, rpm: int | None, tpm: int | None) -> tuple[bool, int, int]:
        tally = self._tallies.of(principal, window)
        if (tpm is not None and tally.tokens >= tpm) or (rpm is not None and tally.requests >= rpm):
            return False, tally.requests, tally.tokens
        tally.requests += 1
        return True, tally.requests, tally.tokens

    def spend(self, principal: str, window: int, tokens: int) -> None:
        self._tallies.of(principal, window).tokens += tokens

    async def aclose(self) -> None:
        pass


# One round trip: a lease of at most ARGV[1] requests, never past the limit ARGV[2] (-1: none), and
# ARGV[3] tokens added; the lease granted, the requests reserved and the tokens counted in the window.
_SYNC = """
local reserved = tonumber(redis.call('GET', KEYS[1]) or '0')
local grant = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
if limit >= 0 then grant = math.max(0, math.min(grant, limit - reserved)) end
if grant > 0 then
  reserved = redis.call('INCRBY', KEYS[1], grant)
  redis.call('EXPIRE', KEYS[1], ARGV[4])
end
local tokens = redis.call('INCRBY', KEYS[2], ARGV[3])
redis.call('EXPIRE', KEYS[2], ARGV[4])
return {grant, reserved, tokens}
"""


class _RedisCounter:
    def __init__(self, url: str) -> None:
        import redis.asyncio

        self._redis = redis.asyncio.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
        self._sync_script = self._redis.register_script(_SYNC)
        self._errors: tuple[type[BaseException], ...] = (redis.RedisError, OSError)
        self._tallies = _Tallies()
        self._sending: asyncio.TimerHandle | None = None

    async def take(self, principal: str, window: int, rpm: int | None, tpm: int | None) -> tuple[bool, int, int]:
        tally = self._tallies.of(principal, window)
        while True:
            if tpm is not None and time.monotonic() - tally.read_at > SEND_S:
                await self._sync(tally, principal, window, rpm, lease=tally.left == 0 and rpm is not None)
                continue
            tokens = tally.tokens + tally.unsent
            if tpm is not None and tokens >= tpm:
                return False, tally.requests - tally.left, tokens
            if rpm is None:
                return True, 0, tokens
            if tally.left > 0:
                tally.left -= 1
                return True, tally.requests - tally.left, tokens
            if tally.spent:
                return False, tally.requests, tokens
            await self._sync(tally, principal, window, rpm, lease=True)

    def spend(self, principal: str, window: int, tokens: int) -> None:
        self._tallies.of(principal, window).unsent += tokens
        self._send_in(SEND_S)

    def _send_in(self, seconds: float) -> None:
        """Send the tokens not sent yet in `seconds` (or sooner, when a send is due already)."""
        if self._sending is None:
            self._sending = asyncio.get_running_loop().call_later(seconds, self._send_spent)

    async def _sync(self, tally: _Tally, principal: str, window: int, rpm: int | None, lease: bool) -> None:
        """One round trip for `tally` (a lease, with `lease`; the tokens unsent; the counts read), or
        the one already under way. Its callers share it; a caller that goes away does not cancel it."""
        task = tally.syncing
        if task is None:
            want = 0
            if lease and rpm is not None:
                now = time.monotonic()
                fast = now - tally.leased_at < _LEASE_FAST_S
                tally.lease = min(max(1, rpm // LEASE_SHARE), tally.lease * 2) if fast else max(1, tally.lease // 2)
                tally.leased_at, want = now, tally.lease
            task = self._start(tally, principal, window, want, rpm)
        await asyncio.shield(task)

    def _start(self, tally: _Tally, principal: str, window: int, want: int, rpm: int | None) -> asyncio.Task[None]:
        task = tally.syncing = asyncio.ensure_future(self._round_trip(tally, principal, window, want, rpm))
        task.add_done_callback(_retrieved)
        return task

    async def _round_trip(self, tally: _Tally, principal: str, window: int, want: int, rpm: int | None) -> None:
        unsent, tally.unsent = tally.unsent, 0
        try:
            grant, reserved, tokens = await self._sync_script(
                keys=[_key(principal, "r", window), _key(principal, "t", window)],
                args=[want, -1 if rpm is None else rpm, unsent, _TTL_S])
        except BaseException as error:  # the tokens are kept for a later round trip (cancelled too)
            tally.unsent += unsent
            if not isinstance(error, self._errors):
                raise
            if tally.unsent:
                self._send_in(_RETRY_S)
            raise _down(error) from None
        finally:
            tally.syncing = None
        if tally.unsent:  # spent while this round trip was under way
            self._send_in(SEND_S)
        tally.left += int(grant)
        tally.requests, tally.tokens, tally.read_at = int(reserved), int(tokens), time.monotonic()
        if want and not grant:
            tally.spent = True

    def _send_spent(self) -> None:
        self._sending = None
        for (principal, window), tally in list(self._tallies.items()):
            if tally.unsent and tally.syncing is None:
                self._start(tally, principal, window, 0, None)

    async def aclose(self) -> None:
        if self._sending is not None:
            self._sending.cancel()
            self._sending = None
        for (principal, window), tally in list(self._tallies.items()):
            if tally.syncing is not None:
                await asyncio.gather(tally.syncing, return_exceptions=True)
            if tally.unsent:
                try:
                    await self._round_trip(tally, principal, window, 0, None)
                except ServiceUnavailableError:
                    log.warning("quotas: %d tokens of %s could not be counted in Redis before the server stopped", tally.unsent, principal)
        if self._sending is not None:  # set by a failed last round trip: nothing will run it now
            self._sending.cancel()
        await self._redis.aclose()


def _retrieved(task: asyncio.Task[None]) -> None:
    # Its callers see its error (a 503); a send of spent tokens has none, and the error is dealt with.
    if not task.cancelled():
        task.exception()


def _down(error: BaseException) -> ServiceUnavailableError:
    return ServiceUnavailableError(f"Quotas could not be checked (the quota store is unavailable: {type(error).__name__}); try again "
                                   "shortly.", code="quota_store_unavailable")


def _reset_s(now: float, window: int) -> int:
    """Whole seconds until `window` ends (at least 1)."""
    return max(1, int((window + 1) * WINDOW_S - now + 0.999))


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

    async def admit(self, principal: str) -> list[tuple[bytes, bytes]]:
        """Count a request; its `x-ratelimit-*` headers, or a 429 when a window is spent."""
        limits = self.limits(principal)
        rpm, tpm = limits.requests_per_minute, limits.tokens_per_minute
        if rpm is None and tpm is None:
            return []
        now = time.time()
        window = int(now // WINDOW_S)
        admitted, requests, tokens = await self.counter.take(principal, window, rpm, tpm)
        reset_s = _reset_s(now, window)
        if not admitted:
            if tpm is not None and tokens >= tpm:
                raise _refused("tokens per min (TPM)", "tokens", tpm, tokens, reset_s)
            raise _refused("requests per min (RPM)", "requests", rpm or 0, requests, reset_s)
        reset = b"%ds" % reset_s
        headers: list[tuple[bytes, bytes]] = []
        if tpm is not None:
            headers += ((b"x-ratelimit-limit-tokens", b"%d" % tpm), (b"x-ratelimit-remaining-tokens", b"%d" % (tpm - tokens)),
                        (b"x-ratelimit-reset-tokens", reset))
        if rpm is not None:
            headers += ((b"x-ratelimit-limit-requests", b"%d" % rpm), (b"x-ratelimit-remaining-requests", b"%d" % (rpm - requests)),
                        (b"x-ratelimit-reset-requests", reset))
        return headers

    def meter(self, principal: str) -> TokenMeter | None:
        """Where a request of `principal` records the tokens its model calls use (None: no token limit)."""
        if self.limits(principal).tokens_per_minute is None:
            return None

        async def spend(usage: Mapping[str, Any]) -> None:
            self.spend(principal, usage_total(usage))

        return spend

    def spend(self, principal: str, tokens: int) -> None:
        if tokens > 0 and self.limits(principal).tokens_per_minute is not None:
            self.counter.spend(principal, int(time.time() // WINDOW_S), tokens)

    async def aclose(self) -> None:
        """Send what is not counted yet (Redis), and close the counter."""
        await self.counter.aclose()


def _key(principal: str, kind: str, window: int) -> str:
    return f"stack:quota:{kind}:{window}:{principal}"


def _refused(what: str, kind: str, limit: int, used: int, reset_s: int) -> RateLimited:
    error = RateLimited(f"Rate limit reached on {what}: Limit {limit}, Used {used}. Please try again in {reset_s}s.",
                        code="rate_limit_exceeded", headers={"retry-after": str(reset_s)})
    error.error_type = kind  # type: ignore[misc]  # OpenAI names the exhausted limit: requests or tokens
    return error


# --- token metering ----------------------------------------------------------------------------

TokenMeter = Callable[[Mapping[str, Any]], Awaitable[None]]
"""Where a request's model calls report their `usage` (chat's names: `prompt_tokens`,
`completion_tokens`, `total_tokens`): its quota (`Quotas.meter`), its usage over time
(runtime.security.usage), or both."""

_meter: contextvars.ContextVar[TokenMeter | None] = contextvars.ContextVar("token_meter", default=None)


def token_meter() -> TokenMeter | None:
    """Where the request being served records the tokens its model calls used (None: not metered)."""
    return _meter.get()


def meter_tokens(record: TokenMeter | None) -> contextvars.Token[Any]:
    return _meter.set(record)


def reset_meter(token: contextvars.Token[Any]) -> None:
    _meter.reset(token)


async def spend_tokens(usage: Any) -> None:
    """Record a chat or embeddings `usage` object with the current request's meter (its quota, its
    usage over time)."""
    record = _meter.get()
    if record is not None and isinstance(usage, dict):
        await record(usage)


def usage_total(usage: Mapping[str, Any]) -> int:
    """A usage object's tokens in all: `total_tokens`, else input and output added up."""
    total = usage.get("total_tokens")
    if isinstance(total, int):
        return total
    return _count(usage.get("prompt_tokens")) + _count(usage.get("completion_tokens"))


def _count(value: Any) -> int:
    return value if isinstance(value, int) and value > 0 else 0
