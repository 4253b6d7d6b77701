"""Quotas (issue 12, item 3), through the openai SDK in server and library modes: requests and
tokens per minute per principal, counted in process or in the Redis running on this machine,
refused with a 429 in OpenAI's shape with retry-after; tokens read from upstream usage, streamed
or not, chat or responses. Principal names are fresh per run, since Redis keeps a window's counts."""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from fake_upstream.server import running_fake_upstream
from support.live_stack import run_yaml, served

RUN = secrets.token_hex(4)


def keys(*names: str) -> str:
    return "\n".join(f'      - {{principal: {name}-{RUN}, key: "sk-{name}-0123456789"}}' for name in names)


def quota_yaml(redis_url: str | None = None) -> str:
    redis = f'\n      redis_url: "{redis_url}"' if redis_url else ""
    return f"""server:
  auth:
    api_keys:
{keys("rpm", "tpm", "stream", "legacy", "resp", "free")}
    quotas:
      requests_per_minute: 3{redis}
      principals:
        tpm-{RUN}: {{tokens_per_minute: 30, requests_per_minute: 100}}
        stream-{RUN}: {{tokens_per_minute: 30, requests_per_minute: 100}}
        legacy-{RUN}: {{tokens_per_minute: 30, requests_per_minute: 100}}
        resp-{RUN}: {{tokens_per_minute: 30, requests_per_minute: 100}}
        free-{RUN}: {{requests_per_minute: 1000}}
"""


def fresh_window() -> None:
    """Wait for a new minute when this one is about to end: a test must not straddle two windows."""
    left = 60 - time.time() % 60
    if left < 8:
        time.sleep(left + 0.1)


@pytest.fixture(scope="module", params=["server-memory", "library-redis"])
def client(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[openai.OpenAI]:
    mode, counter = request.param.split("-")
    with running_fake_upstream() as upstream:
        path = run_yaml(tmp_path_factory.mktemp("quotas"), upstream.base_url, name="quotas")
        path.write_text(path.read_text() + quota_yaml("redis://127.0.0.1:6379/0" if counter == "redis" else None))
        with served(mode, path) as client:
            yield client


def as_(client: openai.OpenAI, name: str) -> openai.OpenAI:
    return client.with_options(api_key=f"sk-{name}-0123456789", max_retries=0)


def test_requests_past_the_per_minute_limit_are_a_429_with_retry_after(client: openai.OpenAI) -> None:
    fresh_window()
    rpm = as_(client, "rpm")
    first = rpm.models.with_raw_response.list()
    assert first.headers["x-ratelimit-limit-requests"] == "3" and first.headers["x-ratelimit-remaining-requests"] == "2"
    rpm.models.list()
    rpm.models.list()
    with pytest.raises(openai.RateLimitError) as refused:
        rpm.models.list()
    body = refused.value.body
    assert body["code"] == "rate_limit_exceeded" and body["type"] == "requests" and "RPM" in body["message"]  # type: ignore[index]
    assert 1 <= int(refused.value.response.headers["retry-after"]) <= 60
    assert as_(client, "free").models.list().data  # another principal's window is its own


def test_tokens_past_the_per_minute_limit_refuse_the_next_request(client: openai.OpenAI) -> None:
    fresh_window()
    tpm = as_(client, "tpm")
    tpm.chat.completions.create(model="fake-model", messages=[{"role": "user", "content": "[tokens:40] spend"}])
    with pytest.raises(openai.RateLimitError) as refused:
        tpm.chat.completions.create(model="fake-model", messages=[{"role": "user", "content": "[tokens:1] more"}])
    assert refused.value.body["type"] == "tokens" and "TPM" in refused.value.body["message"]  # type: ignore[index]


def test_a_stream_that_did_not_ask_for_usage_is_counted_without_seeing_it(client: openai.OpenAI) -> None:
    fresh_window()
    streamer = as_(client, "stream")
    chunks = list(streamer.chat.completions.create(model="fake-model", stream=True,
                                                   messages=[{"role": "user", "content": "[tokens:40] spend"}]))
    assert chunks and all(chunk.usage is None for chunk in chunks) and all(chunk.choices for chunk in chunks)
    with pytest.raises(openai.RateLimitError):
        streamer.chat.completions.create(model="fake-model", messages=[{"role": "user", "content": "[tokens:1] more"}])


def test_a_legacy_completion_stream_is_counted_without_showing_its_usage(client: openai.OpenAI) -> None:
    fresh_window()
    legacy = as_(client, "legacy")
    chunks = list(legacy.completions.create(model="fake-model", prompt="[tokens:40] spend", max_tokens=40, stream=True))
    assert chunks and all(chunk.usage is None for chunk in chunks) and all(chunk.choices for chunk in chunks)
    with pytest.raises(openai.RateLimitError):
        legacy.completions.create(model="fake-model", prompt="[tokens:1] more")


def test_a_responses_model_calls_count_against_the_principal(client: openai.OpenAI) -> None:
    fresh_window()
    responder = as_(client, "resp")
    events = list(responder.responses.create(model="fake-model", input="[tokens:40] spend", stream=True, store=False))
    assert events[-1].type == "response.completed"
    with pytest.raises(openai.RateLimitError):
        responder.responses.create(model="fake-model", input="[tokens:1] more")


@pytest.mark.parametrize("mode", ["server", "library"])
def test_tokens_counted_in_redis_are_sent_before_the_stack_stops(tmp_path: Path, mode: str) -> None:
    """Spent tokens wait up to 0.05 s to go to Redis with others; a stack stopped at once sends them first."""
    import redis

    principal = f"closing-{RUN}-{mode}"
    with running_fake_upstream() as upstream:
        path = run_yaml(tmp_path, upstream.base_url, name="quotas-close")
        path.write_text(path.read_text() + f"""server:
  auth:
    api_keys: [{{principal: {principal}, key: "sk-closing-0123456789"}}]
    quotas: {{tokens_per_minute: 1000, redis_url: "redis://127.0.0.1:6379/0"}}
""")
        fresh_window()
        with served(mode, path) as client:
            client.with_options(api_key="sk-closing-0123456789").chat.completions.create(
                model="fake-model", messages=[{"role": "user", "content": "[tokens:40] spend"}])
        window = int(time.time() // 60)
    counted = redis.Redis.from_url("redis://127.0.0.1:6379/0").get(f"stack:quota:t:{window}:{principal}")
    assert counted is not None and int(counted) >= 40


def test_a_quota_store_that_is_down_refuses_with_a_503(tmp_path: Path) -> None:
    with running_fake_upstream() as upstream:
        path = run_yaml(tmp_path, upstream.base_url, name="quotas-down")
        path.write_text(path.read_text() + quota_yaml("redis://127.0.0.1:9/0"))
        with served("library", path) as client:
            with pytest.raises(openai.APIStatusError) as refused:
                as_(client, "rpm").models.list()
    assert refused.value.status_code == 503 and refused.value.body["code"] == "quota_store_unavailable"  # type: ignore[index]


@pytest.mark.parametrize("mode", ["server", "library"])
def test_the_embeddings_of_a_file_attached_to_a_vector_store_count_against_its_attacher(tmp_path: Path, mode: str) -> None:
    providers = """  files: [{provider_id: local, provider_type: local}]
  vector_stores: [{provider_id: builtin, provider_type: builtin, config: {poll_s: 0.1}}]
"""
    with running_fake_upstream() as upstream:
        path = run_yaml(tmp_path, upstream.base_url, providers=providers, name="quotas-ingest")
        path.write_text(path.read_text() + f"""server:
  auth:
    api_keys:
      - {{principal: reader-{RUN}-{mode}, key: "sk-reader-0123456789"}}
    quotas:
      principals:
        reader-{RUN}-{mode}: {{tokens_per_minute: 200, requests_per_minute: 1000}}
""")
        fresh_window()
        with served(mode, path) as client:
            reader = client.with_options(api_key="sk-reader-0123456789", max_retries=0)
            text = " ".join(f"word{number}" for number in range(400))  # about 400 tokens to embed
            uploaded = reader.files.create(file=("notes.txt", text.encode()), purpose="assistants")
            store = reader.vector_stores.create(name="notes", file_ids=[uploaded.id],
                                                extra_body={"embedding_model": "fake-embed", "embedding_dimension": 384})
            deadline = time.monotonic() + 30
            with pytest.raises(openai.RateLimitError) as refused:  # once the file's tokens spent the reader's 200 a minute
                while reader.vector_stores.files.retrieve(uploaded.id, vector_store_id=store.id).status == "in_progress":
                    assert time.monotonic() < deadline, "the file was never ingested, or its tokens never counted"
                    time.sleep(0.1)
                reader.chat.completions.create(model="fake-model", messages=[{"role": "user", "content": "[tokens:1] more"}])
            embedded = [body for body in upstream.bodies("/v1/embeddings") if "word0" in str(body.get("input"))]
            assert embedded  # the file's text went to the embedding model
    assert refused.value.body["type"] == "tokens"  # type: ignore[index]
