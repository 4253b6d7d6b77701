"""One model, many deployments (issue 47): three fake upstreams on 127.0.0.1, each its own
provider, faults switched on and off while the stack runs; driven by the `openai` SDK over the
server and the library client. Each test has its own model, so one test's circuits are not
another's."""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from fake_upstream import CHAT_MODEL, EMBED_MODEL, FakeUpstream, running_fake_upstream
from runtime.testing.targets import StackTarget, open_target

FAST = "{failures_to_open: 1, cooldown_s: 0.3, first_byte_timeout_s: 1.5}"


def pool(name: str, strategy: str = "least_outstanding", extra: str = "") -> str:
    return f"""  - model_id: {name}
    deployments:
      - {{provider_id: up0, provider_model_id: {CHAT_MODEL}}}
      - {{provider_id: up1, provider_model_id: {CHAT_MODEL}}}
      - {{provider_id: up2, provider_model_id: {CHAT_MODEL}}}
    routing: {{strategy: {strategy}, failures_to_open: 1, cooldown_s: 0.3, first_byte_timeout_s: 1.5}}
{extra}"""


MODELS = "".join([
    pool("spread"), pool("failover"), pool("all-down"), pool("limited"), pool("hang"), pool("streamed"), pool("sticky", "prefix_affinity"),
    f"""  - model_id: weighted
    deployments:
      - {{provider_id: up0, provider_model_id: {CHAT_MODEL}, weight: 2}}
      - {{provider_id: up1, provider_model_id: {CHAT_MODEL}}}
    routing: {{strategy: round_robin}}
  - model_id: guarded
    deployments:
      - {{provider_id: up0, provider_model_id: {CHAT_MODEL}}}
      - {{provider_id: up1, provider_model_id: {CHAT_MODEL}}}
    routing: {FAST}
    fallbacks: [up2/{CHAT_MODEL}]
  - model_id: overflowing
    deployments:
      - {{provider_id: up0, provider_model_id: {CHAT_MODEL}}}
      - {{provider_id: up1, provider_model_id: {CHAT_MODEL}}}
    routing: {FAST}
    context_window_fallbacks: [roomy]
  - model_id: watched
    deployments:
      - {{provider_id: up0, provider_model_id: {CHAT_MODEL}}}
      - {{provider_id: nowhere, provider_model_id: {CHAT_MODEL}}}
    routing: {{failures_to_open: 1, cooldown_s: 30, health_check_s: 0.1}}
  - model_id: metered
    deployments:
      - {{provider_id: up0, provider_model_id: {CHAT_MODEL}, rpm: 2}}
      - {{provider_id: up1, provider_model_id: {CHAT_MODEL}, rpm: 1}}
  - model_id: roomy
    provider_id: up2
    provider_model_id: {CHAT_MODEL}
  - model_id: vectors
    deployments:
      - {{provider_id: up0, provider_model_id: {EMBED_MODEL}}}
      - {{provider_id: up1, provider_model_id: {EMBED_MODEL}}}
    model_type: embedding
    routing: {FAST}
""",
])


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Stack:
    target: StackTarget
    upstreams: list[FakeUpstream]

    def client(self) -> openai.OpenAI:
        return self.target.openai(max_retries=0, timeout=30)

    def calls(self, path: str = "/v1/chat/completions") -> list[int]:
        """How many model calls each upstream has received."""
        return [sum(1 for request in upstream.requests if request.path == path) for upstream in self.upstreams]

    def metric(self, name: str, **labels: str) -> float:
        """A sample of /metrics by its name and labels (0 when there is none yet)."""
        with self.client() as client:
            text = client._client.get(f"{str(client.base_url).rstrip('/').removesuffix('/v1')}/metrics").text
        return next((sample.value for family in text_string_to_metric_families(text) for sample in family.samples
                     if sample.name == name and sample.labels == labels), 0.0)

    def health(self, model: str) -> dict[str, Any]:
        with self.client() as client:
            states: dict[str, Any] = client.get("/health", cast_to=object)["providers"]  # type: ignore[index]
        return states[f"inference/models:{model}"]  # type: ignore[no-any-return]


@pytest.fixture(scope="module", params=["server", "library"])
def stack(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("deployments")
    with contextlib.ExitStack() as stack:
        upstreams = [stack.enter_context(running_fake_upstream()) for _ in range(3)]
        providers = "\n".join(f"    - {{provider_id: up{index}, provider_type: openai, config: {{base_url: '{upstream.base_url}', "
                              f"api_key: k}}}}" for index, upstream in enumerate(upstreams))
        # A deployment on a port nothing listens on: down from the start.
        providers += f"\n    - {{provider_id: nowhere, provider_type: openai, config: {{base_url: 'http://127.0.0.1:{closed_port()}/v1', api_key: k}}}}"
        config = root / "run.yaml"
        config.write_text(f"name: deployments\nstate_dir: {root / 'state'}\nrecording: {{mode: live}}\nserver: {{metrics: {{}}}}\n"
                          f"providers:\n  inference:\n{providers}\nmodels:\n{MODELS}")
        target = stack.enter_context(open_target(f"{request.param}:{config}", env={**os.environ, "STACK_RECORDING_MODE": "live"}))
        yield Stack(target, upstreams)


@pytest.fixture(autouse=True)
def healthy_upstreams(stack: Stack) -> Iterator[None]:
    yield
    for upstream in stack.upstreams:
        upstream.faults.clear()


def ask(stack: Stack, model: str, text: str = "Hello", **fields: Any) -> Any:
    with stack.client() as client:
        return client.chat.completions.create(model=model, messages=[{"role": "user", "content": text}], **fields)


def delta(before: list[int], after: list[int]) -> list[int]:
    return [b - a for a, b in zip(before, after, strict=True)]


def test_the_model_is_listed_once_and_its_requests_go_round_its_deployments(stack: Stack) -> None:
    with stack.client() as client:
        ids = [model.id for model in client.models.list()]
    assert ids.count("spread") == 1
    before = stack.calls()
    answers = [ask(stack, "spread") for _ in range(12)]
    assert delta(before, stack.calls()) == [4, 4, 4]  # one at a time: the least busy is the one picked longest ago
    assert {answer.model for answer in answers} == {"spread"}


def test_the_answer_names_its_deployment_in_a_header(stack: Stack) -> None:
    with stack.client() as client:
        served = [client.chat.completions.with_raw_response.create(model="spread", messages=[{"role": "user", "content": "Hi"}])
                  .headers["x-stack-deployment"] for _ in range(3)]
        plain = client.chat.completions.with_raw_response.create(model=f"up0/{CHAT_MODEL}", messages=[{"role": "user", "content": "Hi"}])
    assert sorted(served) == [f"up{index}/{CHAT_MODEL}" for index in range(3)]
    assert "x-stack-deployment" not in plain.headers  # a model of one provider goes straight to it


def test_round_robin_follows_the_weights(stack: Stack) -> None:
    before = stack.calls()
    for _ in range(9):
        ask(stack, "weighted")
    assert delta(before, stack.calls()) == [6, 3, 0]


def test_a_failing_deployment_is_retried_around_and_ejected_until_it_recovers(stack: Stack) -> None:
    stack.upstreams[1].faults.status = 503
    before = stack.calls()
    answers = [ask(stack, "failover", f"turn {number}").choices[0].message.content for number in range(9)]
    assert all(answers)  # every request answered: the failed attempt went to another deployment
    failed = delta(before, stack.calls())[1]
    assert 1 <= failed <= 3  # its circuit opened at its first failure; a probe after each cooldown at most
    state = {d["provider_id"]: d for d in stack.health("failover")["deployments"]}["up1"]
    assert state["errors"] >= 1 and "503" in (state["last_error"] or "")
    up0, up1 = f"up0/{CHAT_MODEL}", f"up1/{CHAT_MODEL}"
    assert stack.metric("stack_deployment_attempts_total", model="failover", deployment=up1, outcome="server_error") >= 1
    assert stack.metric("stack_deployment_ejections_total", model="failover", deployment=up1) >= 1
    assert stack.metric("stack_deployment_attempts_total", model="failover", deployment=up0, outcome="ok") >= 3
    stack.upstreams[1].faults.clear()
    time.sleep(1.3)  # past the longest cooldown the failures made (0.3 s, doubled per failed probe)
    before = stack.calls()
    for _ in range(6):
        ask(stack, "failover")
    assert delta(before, stack.calls())[1] >= 1  # the probe succeeded: the circuit closed
    assert {d["provider_id"]: d for d in stack.health("failover")["deployments"]}["up1"]["circuit"] == "closed"


def test_every_deployment_down_is_a_503_naming_the_model_at_once(stack: Stack) -> None:
    for upstream in stack.upstreams:
        upstream.faults.status = 502
    started = time.monotonic()
    with pytest.raises(openai.APIStatusError) as raised:
        ask(stack, "all-down")
    assert time.monotonic() - started < 5
    error = raised.value
    assert error.status_code == 503 and isinstance(error.body, dict)
    assert error.body["code"] == "deployments_unavailable" and "'all-down'" in error.body["message"]
    assert "502" in error.body["message"]
    assert stack.health("all-down")["status"] == "unavailable"


def test_a_rate_limited_deployment_rests_for_its_retry_after(stack: Stack) -> None:
    stack.upstreams[0].faults.status, stack.upstreams[0].faults.retry_after = 429, "30"
    before = stack.calls()
    for _ in range(6):
        ask(stack, "limited")
    assert delta(before, stack.calls())[0] == 1  # asked once, then left alone for 30 s
    state = {d["provider_id"]: d for d in stack.health("limited")["deployments"]}["up0"]
    assert state["resting_s"] > 20 and state["circuit"] == "closed"  # a rate limit is no failure of its health


def test_a_hanging_deployment_is_given_up_after_the_first_byte_timeout(stack: Stack) -> None:
    stack.upstreams[0].faults.hang_s = 10
    started = time.monotonic()
    answers = [ask(stack, "hang") for _ in range(3)]
    assert all(answer.choices[0].message.content for answer in answers)
    assert time.monotonic() - started < 6  # one timeout (1.5 s) at most: its circuit then opened


def test_a_stream_is_retried_before_its_first_chunk(stack: Stack) -> None:
    stack.upstreams[0].faults.status = 500
    stack.upstreams[1].faults.status = 500
    with stack.client() as client:
        chunks = list(client.chat.completions.create(model="streamed", messages=[{"role": "user", "content": "[tokens:8] go"}],
                                                     stream=True))
    text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    assert text and {chunk.model for chunk in chunks} == {"streamed"}
    assert stack.calls()[2] >= 1


def test_a_stream_that_broke_after_its_first_chunk_is_not_restarted(stack: Stack) -> None:
    before = stack.calls()
    with stack.client() as client:
        stream = client.chat.completions.create(model="streamed", messages=[{"role": "user", "content": "[tokens:10] [cut:3]"}],
                                                stream=True)
        with pytest.raises(openai.APIError) as error:
            for _ in stream:
                pass
    assert "broke off" in error.value.message
    assert sum(delta(before, stack.calls())) == 1  # the chunks the client had were not sent again from another deployment


def test_fallbacks_answer_when_every_deployment_failed_and_the_answer_names_them(stack: Stack) -> None:
    stack.upstreams[0].faults.status = 503
    stack.upstreams[1].faults.status = 503
    with stack.client() as client:
        raw = client.chat.completions.with_raw_response.create(model="guarded", messages=[{"role": "user", "content": "Hello"}])
    answer = raw.parse()
    assert answer.model == f"up2/{CHAT_MODEL}" and answer.choices[0].message.content
    assert raw.headers["x-stack-deployment"] == f"up2/{CHAT_MODEL}"
    assert stack.metric("stack_model_fallbacks_total", model="guarded", fallback=f"up2/{CHAT_MODEL}", reason="unavailable") == 1


def test_a_context_window_error_goes_to_the_larger_model(stack: Stack) -> None:
    stack.upstreams[0].faults.overflow = True
    stack.upstreams[1].faults.overflow = True
    before = stack.calls()
    answer = ask(stack, "overflowing")
    assert answer.model == "roomy"
    assert sum(delta(before, stack.calls())[:2]) == 1  # the request's own mistake: not retried on the other deployment


def test_a_conversation_sticks_to_the_deployment_holding_its_prefix(stack: Stack) -> None:
    def conversation(name: str, turns: int) -> list[dict[str, str]]:
        messages = [{"role": "system", "content": f"You are assistant {name}."}]
        for turn in range(turns):
            messages += [{"role": "user", "content": f"{name} question {turn}"}, {"role": "assistant", "content": f"answer {turn}"}]
        return messages + [{"role": "user", "content": f"{name} question {turns}"}]

    with stack.client() as client:
        for turns in range(4):
            for name in ("alpha", "beta", "gamma", "delta"):
                client.chat.completions.create(model="sticky", messages=conversation(name, turns))  # type: ignore[arg-type]
    for name in ("alpha", "beta", "gamma", "delta"):
        served = [index for index, upstream in enumerate(stack.upstreams) for request in upstream.requests
                  if request.path == "/v1/chat/completions" and f"assistant {name}." in str(request.body)]
        assert len(served) == 4 and len(set(served)) == 1, (name, served)
    assert stack.health("sticky")["prefixes"] >= 16


def test_embeddings_fail_over_too(stack: Stack) -> None:
    stack.upstreams[0].faults.status = 503
    with stack.client() as client:
        vectors = [client.embeddings.create(model="vectors", input=f"text {number}") for number in range(4)]
    assert all(result.data[0].embedding for result in vectors)
    assert {result.model for result in vectors} == {"vectors"}


def test_a_health_check_ejects_a_dead_deployment_before_a_request_pays_for_it(stack: Stack) -> None:
    deadline = time.monotonic() + 10
    while {d["provider_id"]: d for d in stack.health("watched")["deployments"]}["nowhere"]["circuit"] != "open":
        assert time.monotonic() < deadline, stack.health("watched")
        time.sleep(0.05)
    before = stack.calls()
    for _ in range(4):
        ask(stack, "watched")
    assert delta(before, stack.calls())[0] == 4
    dead = {d["provider_id"]: d for d in stack.health("watched")["deployments"]}["nowhere"]
    assert dead["requests"] == 0 and (dead["last_error"] or "").startswith("health check:")


def test_rpm_limits_spread_the_load_then_answer_429_with_retry_after(stack: Stack) -> None:
    before = stack.calls()
    for _ in range(3):
        ask(stack, "metered")
    assert delta(before, stack.calls())[:2] == [2, 1]
    with pytest.raises(openai.RateLimitError) as raised:
        ask(stack, "metered")
    assert raised.value.response.headers["retry-after"] and "rpm or tpm limit" in str(raised.value)


def test_a_mistake_of_the_request_is_not_retried(stack: Stack) -> None:
    before = stack.calls()
    with pytest.raises(openai.BadRequestError):
        ask(stack, "spread", "[error:400] refused")
    assert sum(delta(before, stack.calls())) == 1
