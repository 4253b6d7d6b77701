"""Which deployment takes the next attempt, and what a failure does to it (a clock of the test's)."""

from __future__ import annotations

import random
from typing import Any

from builder.models import DeploymentConfig, RoutingConfig
from runtime.apis.inference.balancer import Balancer, Deployment, prefix_keys


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def balancer(*weights: float, clock: Clock | None = None, **routing: Any) -> Balancer:
    deployments = [DeploymentConfig(provider_id=f"p{index}", weight=weight) for index, weight in enumerate(weights)]
    return Balancer("m", deployments, RoutingConfig(**routing), clock or Clock(), random.Random(7))


def names(picked: list[Deployment | None]) -> list[str]:
    return [d.provider_id if d is not None else "-" for d in picked]


def take(b: Balancer, count: int, keys: list[int] | None = None) -> list[str]:
    """`count` requests one after the other, each answered at once."""
    picked = []
    for _ in range(count):
        d = b.pick([], keys or [])
        assert d is not None
        b.succeeded(d, 0.01)
        b.released(d)
        picked.append(d.provider_id)
    return picked


def test_round_robin_is_smooth_and_weighted() -> None:
    assert take(balancer(2, 1, strategy="round_robin"), 6) == ["p0", "p1", "p0", "p0", "p1", "p0"]


def test_least_outstanding_counts_in_flight_for_the_weight() -> None:
    b = balancer(1, 2)
    held = [b.pick([]) for _ in range(3)]
    assert names(held) == ["p0", "p1", "p1"]  # p1 takes twice p0's load
    assert b.deployments[0].in_flight == 1 and b.deployments[1].in_flight == 2


def test_an_attempt_never_goes_back_to_a_deployment_it_tried() -> None:
    b = balancer(1, 1)
    first = b.pick([])
    assert first is not None
    second = b.pick([first])
    assert second is not None and second is not first
    assert b.pick([first, second]) is None


def test_failures_open_the_circuit_then_one_probe_closes_it_or_doubles_the_cooldown() -> None:
    clock = Clock()
    b = balancer(1, 1, clock=clock, failures_to_open=2, cooldown_s=10, max_cooldown_s=25)
    down = b.deployments[0]
    for _ in range(2):
        b.failed(down, "502")
    assert down.state == "open" and take(b, 3) == ["p1", "p1", "p1"]
    clock.now += 10  # the cooldown is over: one probe may go
    probe = b.pick([b.deployments[1]])
    assert probe is down and b.pick([b.deployments[1]]) is None  # only one probe at a time
    b.failed(down, "502 again")
    b.released(down)
    assert down.open_until == clock.now + 20  # twice the cooldown
    clock.now += 20
    b.failed(down, "and again")
    assert down.open_until == clock.now + 25  # capped by max_cooldown_s
    clock.now += 25
    probe = b.pick([b.deployments[1]])
    assert probe is down
    b.succeeded(down, 0.02)
    b.released(down)
    assert down.state == "closed" and down.failures == 0 and down.cooldown_s == 0


def test_a_rate_limit_rests_a_deployment_without_opening_its_circuit() -> None:
    clock = Clock()
    b = balancer(1, 1, clock=clock, failures_to_open=1)
    b.failed(b.deployments[0], "429", retry_after_s=30)
    assert b.deployments[0].state == "closed" and take(b, 2) == ["p1", "p1"]
    assert b.next_opening([]) == 0 and b.next_opening([b.deployments[1]]) == 30
    clock.now += 30
    assert "p0" in take(b, 2)


def test_max_concurrency_leaves_a_full_deployment_out() -> None:
    b = Balancer("m", [DeploymentConfig(provider_id="p0", max_concurrency=1)], RoutingConfig(), Clock())
    assert b.pick([]) is not None and b.pick([]) is None


def test_latency_prefers_the_faster_of_two_draws() -> None:
    b = balancer(1, 1, strategy="latency")
    b.deployments[0].ewma_s, b.deployments[1].ewma_s = 0.5, 0.01
    assert take(b, 20).count("p1") == 20


def test_prefix_affinity_keeps_a_conversation_where_its_prefix_is_until_it_is_too_busy() -> None:
    b = balancer(1, 1, 1, strategy="prefix_affinity", affinity_imbalance=1)
    conversation = prefix_keys({"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "q1"}]})
    first = take(b, 1, conversation)[0]
    longer = prefix_keys({"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "q1"},
                                       {"role": "assistant", "content": "a1"}, {"role": "user", "content": "q2"}]})
    assert longer[:2] == conversation and take(b, 3, longer) == [first] * 3
    held = [b.pick([], longer) for _ in range(2)]  # two in flight on it, none elsewhere: past the imbalance allowed
    assert names(held) == [first, first]
    assert b.pick([], longer).provider_id != first  # type: ignore[union-attr]


def test_the_prefix_index_forgets_the_least_recently_used() -> None:
    b = balancer(1, 1, strategy="prefix_affinity", prefix_index_size=3)
    for number in range(5):
        take(b, 1, [number])
    assert len(b._prefixes) == 3 and set(b._prefixes) == {2, 3, 4}


def test_prefix_keys_hash_each_message_with_those_before() -> None:
    one = prefix_keys({"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": [{"type": "text", "text": "b"}]}]})
    other = prefix_keys({"messages": [{"role": "user", "content": "x"}, {"role": "user", "content": [{"type": "text", "text": "b"}]}]})
    assert len(one) == 2 and one[1] != other[1]
    assert len(prefix_keys({"prompt": "p" * 1100})) == 3 and prefix_keys({"input": "embed me"}) == []


def test_rpm_and_tpm_rest_a_deployment_until_its_minute_is_over() -> None:
    clock = Clock()
    deployments = [DeploymentConfig(provider_id="p0", rpm=2), DeploymentConfig(provider_id="p1", tpm=100)]
    b = Balancer("m", deployments, RoutingConfig(), clock)
    assert take(b, 2) == ["p0", "p1"]
    b.used_tokens(b.deployments[1], 100)  # p1 has used its minute's tokens
    assert take(b, 1) == ["p0"]  # p0's second request this minute: its last
    assert b.pick([]) is None and b.over_limits(b.deployments[0]) and b.over_limits(b.deployments[1])
    assert b.next_opening([]) == 60
    clock.now += 60
    assert sorted(take(b, 2)) == ["p0", "p1"]


def test_a_health_check_closes_an_open_circuit_and_its_failure_counts() -> None:
    b = balancer(1, 1, failures_to_open=2)
    down = b.deployments[0]
    b.checked(down, "cannot connect")
    assert down.state == "closed" and down.failures == 1
    b.checked(down, "cannot connect")
    assert down.state == "open"
    b.checked(down, None)
    assert down.state == "closed" and down.failures == 0
