"""Prometheus metrics (issue 12, item 4), in server and library modes: /metrics parsed with the
client library's own parser after known traffic, and checked series by series."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from fake_upstream.server import running_fake_upstream
from support.live_stack import run_yaml, served


@pytest.fixture(scope="module", params=["server", "library"])
def client(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[openai.OpenAI]:
    with running_fake_upstream() as upstream:
        path = run_yaml(tmp_path_factory.mktemp("metrics"), upstream.base_url, name="metrics")
        path.write_text(path.read_text() + "server:\n  metrics: {}\n")
        with served(request.param, path) as client:
            yield client


def scrape(client: openai.OpenAI) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    text = client._client.get(str(client.base_url).replace("/v1/", "/metrics")).text  # the SDK's own HTTP client, server or in-process
    return {(sample.name, frozenset(sample.labels.items())): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def value(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float:
    return sum(v for (n, ls), v in samples.items() if n == name and set(labels.items()) <= set(ls))


def test_known_traffic_shows_in_the_metrics(client: openai.OpenAI) -> None:
    before = scrape(client)
    client.chat.completions.create(model="fake-model", messages=[{"role": "user", "content": "[tokens:3] a"}])
    list(client.chat.completions.create(model="fake-model", stream=True, messages=[{"role": "user", "content": "[tokens:4] b"}]))
    client.responses.create(model="fake-model", input="[tokens:5] c")
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve("resp_missing")
    after = scrape(client)

    def grew(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert grew("stack_requests_total", route="/v1/chat/completions", method="POST", status="200") == 2
    assert grew("stack_requests_total", route="/v1/responses", method="POST", status="200") == 1
    assert grew("stack_requests_total", route="/v1/responses/{response_id}", method="GET", status="404") == 1
    assert grew("stack_request_duration_seconds_count", route="/v1/chat/completions") == 2
    assert grew("stack_upstream_duration_seconds_count", provider="fake", kind="chat") == 3  # the response's model call too
    assert grew("stack_upstream_time_to_first_token_seconds_count", provider="fake") >= 1
    assert grew("stack_tokens_total", provider="fake", direction="out") == 3 + 4 + 5
    assert grew("stack_tokens_total", provider="fake", direction="in") > 0
    assert value(after, "stack_open_streams") == 0  # every stream has ended


def test_legacy_completions_are_counted_as_text_completions(client: openai.OpenAI) -> None:
    before = scrape(client)
    client.completions.create(model="fake-model", prompt="[tokens:2] a")
    list(client.completions.create(model="fake-model", prompt="[tokens:3] b", stream=True))  # usage asked of the upstream, not shown
    after = scrape(client)

    def grew(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert grew("stack_requests_total", route="/v1/completions", method="POST", status="200") == 2
    assert grew("stack_upstream_duration_seconds_count", provider="fake", kind="text_completion") == 2
    assert grew("stack_tokens_total", provider="fake", direction="out") == 2 + 3


def test_metrics_are_off_unless_configured(tmp_path: Path) -> None:
    with running_fake_upstream() as upstream, served("library", run_yaml(tmp_path, upstream.base_url)) as client:
        assert client._client.get(str(client.base_url).replace("/v1/", "/metrics")).status_code == 404
