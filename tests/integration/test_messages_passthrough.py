"""`/v1/messages` to an Anthropic upstream (issue 46, item 2): the `anthropic` inference provider
pointed at the fake Anthropic server (tests/fake_anthropic), driven by the `anthropic` SDK in server
and library modes. The fake receives the client's bytes (cache_control, thinking, a document with
citations, a server tool, Anthropic's own blocks handed back), the model id alone renamed, plain and
streamed; its answer reaches the client as it was (but for `model`); the metrics and the token
quotas count it; its 529 reaches the client as a 529 `overloaded_error`."""

from __future__ import annotations

import json
import os
import re
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anthropic
import pytest
from prometheus_client.parser import text_string_to_metric_families

from fake_anthropic import RETRY_AFTER_S, FakeAnthropic, RecordedRequest, running_fake_anthropic, sign
from fake_anthropic.answers import plan_message, render_events, render_message
from runtime.testing.targets import StackTarget, open_target

UPSTREAM_MODEL = "claude-fake-sonnet"
MODEL = f"claude/{UPSTREAM_MODEL}"
RUN = secrets.token_hex(4)
PRINCIPALS = ("open", "tpm", "stream")
DOCUMENT = {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "The Eiffel Tower is in Paris."},
            "title": "Facts", "citations": {"enabled": True}, "cache_control": {"type": "ephemeral"}}
REQUEST: dict[str, Any] = {
    "model": MODEL, "max_tokens": 2048, "thinking": {"type": "enabled", "budget_tokens": 1024},
    "system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
    "tools": [{"type": "web_search_20250305", "name": "web_search", "max_uses": 2}],
    "messages": [{"role": "user", "content": [DOCUMENT, {"type": "text", "text": "Where is the tower?"}]}],
}


@dataclass
class Stack:
    target: StackTarget
    upstream: FakeAnthropic

    def client(self, principal: str = "open") -> anthropic.Anthropic:
        return self.target.anthropic(api_key=f"sk-{principal}-0123456789", max_retries=0, timeout=30)

    def received(self) -> RecordedRequest:
        return [request for request in self.upstream.requests if request.path == "/v1/messages"][-1]


def run_yaml(root: Path, upstream: FakeAnthropic) -> Path:
    keys = "\n".join(f'      - {{principal: {name}-{RUN}, key: "sk-{name}-0123456789"}}' for name in PRINCIPALS)
    path = root / "run.yaml"
    path.write_text(f"""
name: messages-passthrough
state_dir: {root / 'state'}
recording: {{mode: live}}
providers:
  inference:
    - provider_id: claude
      provider_type: anthropic
      config: {{base_url: "{upstream.url}", api_key: secret}}
  messages: [{{provider_id: builtin, provider_type: builtin}}]
server:
  metrics: {{}}
  auth:
    api_keys:
{keys}
    quotas:
      principals:
        tpm-{RUN}: {{tokens_per_minute: 30, requests_per_minute: 100}}
        stream-{RUN}: {{tokens_per_minute: 30, requests_per_minute: 100}}
""")
    return path


@pytest.fixture(scope="module", params=["server", "library"])
def stack(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("messages-passthrough")
    with running_fake_anthropic(api_key="secret") as upstream:
        config = run_yaml(root, upstream)
        with open_target(f"{request.param}:{config}", env={**os.environ, "STACK_RECORDING_MODE": "live"}) as target:
            yield Stack(target, upstream)


@pytest.fixture
def claude(stack: Stack) -> Iterator[anthropic.Anthropic]:
    client = stack.client()
    yield client
    client.close()


def upstream_bytes(sent: bytes, model: str = MODEL) -> bytes:
    """What the upstream is to receive of a client's `sent` bytes: the same, the model renamed."""
    renamed, count = re.subn(rb'"model"\s*:\s*"' + model.encode() + b'"', b'"model":"' + UPSTREAM_MODEL.encode() + b'"', sent)
    assert count == 1
    return renamed


def for_the_client(answer: bytes) -> bytes:
    """What the client is to receive of the upstream's answer: the same, with its own model id."""
    return answer.replace(f'"model": "{UPSTREAM_MODEL}"'.encode(), f'"model":"{MODEL}"'.encode(), 1)


def test_a_message_goes_to_anthropic_as_the_client_wrote_it_and_comes_back_as_it_answered(stack: Stack,
                                                                                          claude: anthropic.Anthropic) -> None:
    response = claude.messages.with_raw_response.create(**REQUEST)
    received = stack.received()
    assert received.raw == upstream_bytes(response.http_request.content)
    assert received.body["messages"][0]["content"][0] == DOCUMENT and received.body["tools"] == REQUEST["tools"]
    upstream_answer = json.dumps(render_message(plan_message(received.body, received.raw))).encode()
    assert response.http_response.content == for_the_client(upstream_answer)
    message = response.parse()
    assert message.model == MODEL and [block.type for block in message.content] == ["thinking", "text"]
    assert message.usage.cache_read_input_tokens == 10  # Anthropic's own usage, as it was


def test_a_model_by_the_upstreams_own_name_goes_byte_for_byte(stack: Stack, claude: anthropic.Anthropic) -> None:
    body = b'{"model": "claude-fake-sonnet",\n  "max_tokens": 16, "messages": [{"role": "user", "content": "Caf\\u00e9?"}]}'
    answer = claude._client.post(f"{str(claude.base_url).rstrip('/')}/v1/messages", content=body, headers={
        "content-type": "application/json", "x-api-key": "sk-open-0123456789", "anthropic-version": "2023-06-01"})
    assert answer.status_code == 200 and stack.received().raw == body
    assert answer.content == json.dumps(render_message(plan_message(json.loads(body), body))).encode()


def test_a_streamed_message_gives_the_upstreams_events_as_they_came(stack: Stack, claude: anthropic.Anthropic) -> None:
    with claude.messages.with_streaming_response.create(**REQUEST, stream=True) as response:
        streamed = b"".join(response.iter_bytes())
        sent = response.http_request.content
    received = stack.received()
    assert received.raw == upstream_bytes(sent)
    assert streamed == for_the_client(b"".join(render_events(plan_message(received.body, received.raw))))
    with claude.messages.stream(**REQUEST) as events:
        final = events.get_final_message()
    assert final.model == MODEL and final.content[0].type == "thinking" and final.stop_reason == "end_turn"


@pytest.mark.parametrize("call", ["create", "stream", "count_tokens"])
def test_the_clients_beta_flags_go_with_its_request(stack: Stack, claude: anthropic.Anthropic, call: str) -> None:
    """Claude Code sends fields (`context_management`) that Anthropic takes only under the beta that
    names them: a request passed through carries the client's flags, each once; one not shaped like
    a flag is left out of the header, not sent on."""
    body: dict[str, Any] = {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}],
                            "extra_body": {"context_management": {"edits": []}}}
    flags = {"anthropic-beta": "context-management-2025-06-27, mcp-client-2025-04-04,context-management-2025-06-27,bad flag!"}
    if call == "count_tokens":
        claude.messages.count_tokens(**body, extra_headers=flags)
        path = "/v1/messages/count_tokens"
    else:
        claude.messages.create(**body, max_tokens=64, stream=call == "stream", extra_headers=flags)
        path = "/v1/messages"
    received = [request for request in stack.upstream.requests if request.path == path][-1]
    assert received.headers["anthropic-beta"] == "context-management-2025-06-27,mcp-client-2025-04-04"
    assert received.body["context_management"] == {"edits": []}
    claude.messages.create(model=MODEL, max_tokens=16, messages=[{"role": "user", "content": "Hi"}])
    assert "anthropic-beta" not in stack.received().headers  # none of the last request's stays behind


@pytest.mark.parametrize("streamed", [False, True], ids=["plain", "streamed"])
def test_claudes_signed_thinking_and_server_tool_blocks_go_back_as_they_are(stack: Stack, claude: anthropic.Anthropic,
                                                                            streamed: bool) -> None:
    first = claude.messages.create(**REQUEST)
    thinking = first.content[0]
    assert thinking.type == "thinking" and thinking.signature == sign(thinking.thinking)  # Anthropic's signature, not the stack's
    searched = [{"type": "server_tool_use", "id": "srvtoolu_01", "name": "web_search", "input": {"query": "Eiffel Tower"}},
                {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_01", "content": [
                    {"type": "web_search_result", "url": "https://example.com", "title": "Tower", "encrypted_content": "enc"}]}]
    turns = [*REQUEST["messages"], {"role": "assistant", "content": [thinking.model_dump(), *searched, first.content[1].model_dump()]},
             {"role": "user", "content": "[tokens:3] And its height?"}]
    if streamed:
        with claude.messages.stream(**{**REQUEST, "messages": turns}) as events:
            again = events.get_final_message()
    else:
        again = claude.messages.create(**{**REQUEST, "messages": turns})
    assert again.content[-1].text == "word0 word1 word2"  # type: ignore[union-attr]
    assert stack.received().body["messages"][1]["content"] == turns[1]["content"]


@pytest.mark.parametrize("streamed", [False, True], ids=["plain", "streamed"])
def test_an_overloaded_upstream_is_anthropics_529_and_a_rate_limit_its_429(claude: anthropic.Anthropic, streamed: bool) -> None:
    for directive, status, kind, error in (("[error:529]", 529, "overloaded_error", anthropic.OverloadedError),
                                           ("[error:429]", 429, "rate_limit_error", anthropic.RateLimitError)):
        ask: list[Any] = [{"role": "user", "content": f"Hi {directive}"}]
        with pytest.raises(error) as refused:
            if streamed:
                with claude.messages.stream(model=MODEL, max_tokens=16, messages=ask) as events:
                    events.get_final_message()
            else:
                claude.messages.create(model=MODEL, max_tokens=16, messages=ask)
        assert refused.value.status_code == status and refused.value.response.headers["retry-after"] == RETRY_AFTER_S
        envelope: Any = refused.value.body
        assert envelope["error"] == {"type": kind, "message": "Overloaded" if status == 529 else "fake anthropic error 429"}


def test_a_stream_anthropic_breaks_ends_with_its_error_event(claude: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.APIStatusError) as broken:
        with claude.messages.stream(model=MODEL, max_tokens=16, messages=[{"role": "user", "content": "Hi [stream_error]"}]) as events:
            events.get_final_message()
    assert "Overloaded" in str(broken.value)


def metric(stack: Stack, claude: anthropic.Anthropic, name: str, **labels: str) -> float:
    text = claude._client.get(f"{str(claude.base_url).rstrip('/')}/metrics", headers={"x-api-key": "sk-open-0123456789"}).text
    return sum(sample.value for family in text_string_to_metric_families(text) for sample in family.samples
               if sample.name == name and all(sample.labels.get(key) == value for key, value in labels.items()))


def test_the_metrics_count_its_tokens_and_times(stack: Stack, claude: anthropic.Anthropic) -> None:
    model = {"provider": "claude", "model": UPSTREAM_MODEL}

    def counts() -> tuple[float, ...]:
        return (metric(stack, claude, "stack_tokens_total", direction="in", **model),
                metric(stack, claude, "stack_tokens_total", direction="out", **model),
                metric(stack, claude, "stack_upstream_duration_seconds_count", kind="messages", **model),
                metric(stack, claude, "stack_upstream_time_to_first_token_seconds_count", **model))

    before = counts()
    message = claude.messages.create(**REQUEST)
    with claude.messages.stream(**REQUEST) as events:
        events.get_final_message()
    usage = message.usage
    prompt = usage.input_tokens + (usage.cache_read_input_tokens or 0) + (usage.cache_creation_input_tokens or 0)
    after = counts()
    assert [round(b - a) for a, b in zip(before, after, strict=True)] == [2 * prompt, 2 * usage.output_tokens, 2, 1]


def fresh_window() -> None:
    """Wait for a new minute when this one is about to end: a test must not straddle two windows."""
    left = 60 - time.time() % 60
    if left < 8:
        time.sleep(left + 0.1)


@pytest.mark.parametrize("streamed", [False, True], ids=["plain", "streamed"])
def test_its_tokens_count_against_the_quota(stack: Stack, streamed: bool) -> None:
    fresh_window()
    client = stack.client("stream" if streamed else "tpm")
    spend: dict[str, Any] = {"model": MODEL, "max_tokens": 64, "messages": [{"role": "user", "content": "[tokens:40] spend"}]}
    if streamed:
        with client.messages.stream(**spend) as events:
            assert events.get_final_message().usage.output_tokens == 40
    else:
        assert client.messages.create(**spend).usage.output_tokens == 40
    with pytest.raises(anthropic.RateLimitError) as refused:
        client.messages.create(model=MODEL, max_tokens=16, messages=[{"role": "user", "content": "[tokens:1] more"}])
    assert "TPM" in refused.value.body["error"]["message"]  # type: ignore[index]
    client.close()


def test_count_tokens_is_anthropics_own_count_not_a_billed_completion(stack: Stack, claude: anthropic.Anthropic) -> None:
    """Anthropic's count_tokens route costs nothing; a one-token completion would be a billed call."""
    before = len([request for request in stack.upstream.requests if request.path == "/v1/messages"])
    counted = claude.messages.count_tokens(model=MODEL, system="Be brief.", messages=[{"role": "user", "content": "count these words"}])
    assert counted.input_tokens > 0
    sent = [request for request in stack.upstream.requests if request.path == "/v1/messages/count_tokens"][-1]
    assert sent.body["model"] == UPSTREAM_MODEL and sent.body["system"] == "Be brief." and "max_tokens" not in sent.body
    assert len([request for request in stack.upstream.requests if request.path == "/v1/messages"]) == before  # no completion made
