"""runtime.security.quotas: the counting behind a 429. In this process the counts are exact; with Redis (the
one running on this machine) replicas reserve requests in leases, never past the limit, and send
spent tokens in batches within `SEND_S`. Principal names are fresh per test: Redis keeps a window."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from builder.config import QuotaConfig
from runtime.security import quotas as quotas_module
from contract.errors import ServiceUnavailableError
from runtime.security.quotas import LEASE_SHARE, SEND_S, Quotas, RateLimited

REDIS = "redis://127.0.0.1:6379/0"


def fresh() -> str:
    return f"quota-test-{secrets.token_hex(6)}"


def in_one_window() -> None:
    """Wait for a new minute when this one is about to end: a test must not straddle two windows."""
    left = 60 - time.time() % 60
    if left < 5:
        time.sleep(left + 0.1)


def run(test: Callable[[], Awaitable[None]]) -> None:
    in_one_window()
    asyncio.run(test())


def replicas(count: int, redis_url: str | None = REDIS, **limits: Any) -> list[Quotas]:
    return [Quotas(QuotaConfig(redis_url=redis_url, **limits)) for _ in range(count)]


async def admitted(quotas: Quotas, principal: str) -> bool:
    try:
        await quotas.admit(principal)
    except RateLimited:
        return False
    return True


def round_trips(quotas: Quotas) -> list[int]:
    """The requests each of `quotas`' round trips to Redis asked to reserve (the script still runs)."""
    leases: list[int] = []
    counter: Any = quotas.counter
    script = counter._sync_script

    async def counted(*, keys: list[str], args: list[Any]) -> Any:
        leases.append(int(args[0]))
        return await script(keys=keys, args=args)

    counter._sync_script = counted
    return leases


@pytest.mark.parametrize("redis_url", [None, REDIS], ids=["memory", "redis"])
def test_the_request_past_the_limit_is_a_429_and_the_headers_count_down(redis_url: str | None) -> None:
    async def test() -> None:
        [quotas] = replicas(1, redis_url, requests_per_minute=3)
        principal = fresh()
        remaining = [dict(await quotas.admit(principal))[b"x-ratelimit-remaining-requests"] for _ in range(3)]
        assert remaining == [b"2", b"1", b"0"]
        with pytest.raises(RateLimited) as refused:
            await quotas.admit(principal)
        assert refused.value.status == 429 and "Limit 3, Used 3" in refused.value.message
        assert await admitted(quotas, fresh())  # another principal's window is its own
        await quotas.aclose()

    run(test)


def test_replicas_sharing_redis_never_admit_past_the_limit_and_small_limits_are_exact() -> None:
    async def test() -> None:
        for limit, least in ((150, 150), (1_000, 1_000 - 2 * (1_000 // LEASE_SHARE))):
            first, second = replicas(2, requests_per_minute=limit)
            principal, count = fresh(), 0
            for _ in range(limit + 50):  # interleaved, as two replicas behind a balancer
                count += await admitted(first, principal)
                count += await admitted(second, principal)
            # A lease reserved and not used by the window's end goes unused: at most 1 % of the limit each.
            assert least <= count <= limit, (limit, count)
            await first.aclose()
            await second.aclose()

    run(test)


def test_a_busy_principal_is_counted_in_leases_that_grow_and_are_capped() -> None:
    async def test() -> None:
        [quotas] = replicas(1, requests_per_minute=100_000)
        leases = round_trips(quotas)
        principal = fresh()
        for _ in range(3_000):
            assert await admitted(quotas, principal)
        assert len(leases) < 30, leases  # about 3,000 round trips, one a request, before
        assert leases[:4] == [1, 2, 4, 8] and max(leases) == 100_000 // LEASE_SHARE
        await quotas.aclose()

    run(test)


def test_concurrent_requests_share_one_round_trip() -> None:
    async def test() -> None:
        [quotas] = replicas(1, requests_per_minute=100)  # a lease of 1: one request a round trip
        leases = round_trips(quotas)
        principal = fresh()
        results = await asyncio.gather(*(admitted(quotas, principal) for _ in range(120)))
        assert results.count(True) == 100
        assert len(leases) <= 101  # one round trip per lease, and one that finds the window spent
        await quotas.aclose()

    run(test)


def test_tokens_spent_on_one_replica_refuse_the_next_request_on_another_within_send_s() -> None:
    async def test() -> None:
        first, second = replicas(2, tokens_per_minute=100)
        principal = fresh()
        assert await admitted(first, principal) and await admitted(second, principal)
        meter = first.meter(principal)
        assert meter is not None
        await meter({"total_tokens": 150})
        assert not await admitted(first, principal)  # at once where they were spent
        await asyncio.sleep(2 * SEND_S)
        with pytest.raises(RateLimited) as refused:
            await second.admit(principal)
        assert refused.value.error_type == "tokens" and "Used 150" in refused.value.message
        await first.aclose()
        await second.aclose()

    run(test)


def test_tokens_not_sent_yet_are_sent_when_the_server_stops() -> None:
    async def test() -> None:
        first, second = replicas(2, tokens_per_minute=100)
        principal = fresh()
        meter = first.meter(principal)
        assert meter is not None
        await meter({"total_tokens": 120})
        await first.aclose()  # before SEND_S has passed
        assert not await admitted(second, principal)
        await second.aclose()

    run(test)


def test_a_redis_that_cannot_be_reached_refuses_with_a_503_and_keeps_the_tokens(caplog: pytest.LogCaptureFixture) -> None:
    async def test() -> None:
        [quotas] = replicas(1, "redis://127.0.0.1:9/0", requests_per_minute=10, tokens_per_minute=100)
        principal = fresh()
        with pytest.raises(ServiceUnavailableError) as down:
            await quotas.admit(principal)
        assert down.value.status == 503 and down.value.code == "quota_store_unavailable"
        quotas.spend(principal, 40)
        await quotas.aclose()
        assert "40 tokens" in caplog.text and principal in caplog.text  # not silently dropped

    run(test)


def test_in_process_counts_are_exact_for_tokens_too() -> None:
    async def test() -> None:
        [quotas] = replicas(1, None, tokens_per_minute=100)
        principal = fresh()
        headers = dict(await quotas.admit(principal))
        assert headers[b"x-ratelimit-remaining-tokens"] == b"100" and b"x-ratelimit-limit-requests" not in headers
        quotas.spend(principal, 99)
        assert dict(await quotas.admit(principal))[b"x-ratelimit-remaining-tokens"] == b"1"
        quotas.spend(principal, 1)
        assert not await admitted(quotas, principal)

    run(test)


def test_past_windows_are_dropped_as_windows_pass() -> None:
    tallies = quotas_module._Tallies()
    tallies.of("a", 1).tokens = 5
    tallies.of("b", 1).unsent = 3  # not sent yet: kept
    tallies.of("a", 2)
    assert sorted(tallies) == [("a", 2), ("b", 1)]
