"""The database going away and coming back (PostgreSQL, reached through a proxy the test cuts, or
freezes as a network partition would): while it is away every request that needs it is a 503 the
client may retry, in OpenAI's shape with `Retry-After`, and `/v1/health` says which backend is down;
once it is back the same server answers as before, with nothing restarted."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest

from fake_upstream.server import FakeUpstream
from support.live_stack import served
from support.postgres import fresh_database
from support.tcp_proxy import TcpProxy, postgres_behind_proxy

pytestmark = pytest.mark.postgres


def _config(root: Path, upstream: FakeUpstream, dsn: str) -> Path:
    path = root / "run.yaml"
    path.write_text(f"""
name: outage
state_dir: {root / 'state'}
recording: {{mode: live}}
providers:
  inference: [{{provider_id: fake, provider_type: openai, config: {{base_url: "{upstream.base_url}", api_key: k}}}}]
  responses: [{{provider_id: builtin, provider_type: builtin}}]
  conversations: [{{provider_id: builtin, provider_type: builtin}}]
storage:
  backends:
    pg: {{type: postgres, dsn: "{dsn}", pool_size: 4, connect_timeout_s: 5, command_timeout_s: 2}}
  stores: {{responses: pg, conversations: pg, chat_completions: pg, metadata: pg}}
""")
    return path


@pytest.fixture(params=["server", "library"])
def outage(request: pytest.FixtureRequest, tmp_path: Path, upstream: FakeUpstream) -> Iterator[tuple[openai.OpenAI, TcpProxy]]:
    with fresh_database() as dsn, postgres_behind_proxy(dsn) as (proxied, proxy):
        with served(request.param, _config(tmp_path, upstream, proxied)) as client:
            yield client, proxy


def _health(client: openai.OpenAI) -> Any:
    response = client.get("/health", cast_to=httpx2.Response)
    assert response.status_code == 200  # the server answers: it is the database that is away
    return response.json()


def _assert_unavailable(error: pytest.ExceptionInfo[openai.APIStatusError]) -> None:
    assert error.value.status_code == 503
    assert error.value.response.headers["retry-after"] == "1"
    body = error.value.response.json()["error"]
    assert (body["type"], body["code"], body["param"]) == ("service_unavailable", "storage_unavailable", None)
    assert body["message"].startswith("The server's database is unavailable right now (")
    assert "5432" not in body["message"] and "postgres" not in body["message"]  # nothing of the DSN


def test_requests_while_the_database_is_away_are_retryable_503s_and_the_server_recovers(outage: tuple[openai.OpenAI, TcpProxy]) -> None:
    client, proxy = outage
    first = client.responses.create(model="fake/fake-model", input="[tokens:2] before")
    conversation = client.conversations.create(items=[{"type": "message", "role": "user", "content": "kept"}])
    assert _health(client)["storage"] == {"pg": {"status": "ok", "dialect": "postgresql", "detail": None}}

    proxy.cut()
    # A stored response is written once, with its answer: the model was asked, but the client is
    # told nothing was kept (no id, a status to retry on), which is what happened.
    with pytest.raises(openai.APIStatusError) as refused:
        client.responses.create(model="fake/fake-model", input="[tokens:2] while away")
    _assert_unavailable(refused)
    for read in (lambda: client.responses.retrieve(first.id), lambda: client.conversations.items.list(conversation.id),
                 lambda: client.conversations.create()):
        with pytest.raises(openai.APIStatusError) as refused:
            read()
        _assert_unavailable(refused)
    with pytest.raises(openai.APIStatusError) as refused:
        client.responses.create(model="fake/fake-model", input="[tokens:2] streamed while away", stream=True)
    _assert_unavailable(refused)
    health = _health(client)
    assert health["status"] == "degraded"
    assert health["storage"]["pg"]["status"] == "unavailable"
    assert health["storage"]["pg"]["detail"].startswith("the database could not be reached")

    proxy.restore()
    assert client.responses.retrieve(first.id).output_text == first.output_text
    assert [item.type for item in client.conversations.items.list(conversation.id)] == ["message"]
    again = client.responses.create(model="fake/fake-model", input="[tokens:2] back", previous_response_id=first.id)
    assert again.status == "completed"
    assert _health(client)["status"] == "ok"


def test_the_sdk_retries_through_a_short_outage(outage: tuple[openai.OpenAI, TcpProxy]) -> None:
    client, proxy = outage
    conversation = client.conversations.create()
    proxy.cut()
    retrying = client.with_options(max_retries=3)
    with pytest.raises(openai.APIStatusError) as refused:
        client.conversations.retrieve(conversation.id)  # no retries: the outage is seen
    _assert_unavailable(refused)
    threading.Timer(0.5, proxy.restore).start()
    # The SDK waits the Retry-After second and asks again: the database is back by then.
    assert retrying.conversations.retrieve(conversation.id).id == conversation.id


def _stored_when_back(client: openai.OpenAI, response_id: str) -> Any:
    deadline = time.monotonic() + 20
    while (stored := client.responses.retrieve(response_id)).status == "in_progress" and time.monotonic() < deadline:
        time.sleep(0.2)
    return stored


@pytest.mark.parametrize("background", [False, True], ids=["streamed", "background"])
def test_a_response_under_way_when_the_database_goes_away_ends_as_it_would_and_is_stored_once_it_is_back(
        outage: tuple[openai.OpenAI, TcpProxy], background: bool) -> None:
    client, proxy = outage
    conversation = client.conversations.create()
    events: list[Any] = []
    with client.responses.create(model="fake/fake-model", input="[tokens:6] [slow:150] go on", stream=True, background=background,
                                 conversation=conversation.id) as stream:
        for event in stream:
            events.append(event)
            if event.type == "response.output_text.delta" and len(events) == _first_delta(events):
                proxy.cut()  # mid-answer: the deltas, the item's end and the response's end still to come
    # The client gets the response's end as if nothing had happened: it has every event of it.
    final = events[-1]
    assert final.type == "response.completed"
    text = "".join(event.delta for event in events if event.type == "response.output_text.delta")
    assert text == final.response.output_text == "tok1 tok2 tok3 tok4 tok5 tok6"

    proxy.restore()
    stored = _stored_when_back(client, final.response.id)
    assert (stored.status, stored.output_text, stored.error) == ("completed", text, None)  # not cancelled, nothing lost
    items = client.conversations.items.list(conversation.id, order="asc")
    assert [item.type for item in items] == ["message", "message"]  # the turn joined its conversation, once
    if background:  # its events, logged once the database was back, replay whole
        replayed = list(client.responses.retrieve(final.response.id, stream=True, starting_after=0))
        assert [event.type for event in replayed][-1] == "response.completed"
        assert "".join(event.delta for event in replayed if event.type == "response.output_text.delta") == text


def _first_delta(events: list[Any]) -> int:
    """The position (from 1) of the stream's first text delta."""
    return next(number for number, event in enumerate(events, 1) if event.type == "response.output_text.delta")


def test_a_database_that_stops_answering_is_a_503_within_the_command_timeout_not_a_request_that_hangs(
        outage: tuple[openai.OpenAI, TcpProxy]) -> None:
    client, proxy = outage
    conversation = client.conversations.create()
    proxy.freeze()  # a partition: the connections stay open, nothing comes back, nothing is refused
    try:
        with pytest.raises(openai.APIStatusError) as refused:
            client.with_options(timeout=60).conversations.retrieve(conversation.id)  # command_timeout_s: 2
        _assert_unavailable(refused)
        assert "(the database did not answer in time)" in refused.value.message
        health = _health(client)
        assert (health["status"], health["storage"]["pg"]["status"]) == ("degraded", "unavailable")
    finally:
        proxy.thaw()
    # The connection that timed out was dropped: the next request takes a new one and is answered.
    assert client.conversations.retrieve(conversation.id).id == conversation.id
    assert _health(client)["status"] == "ok"


def test_over_a_websocket_the_database_away_is_an_error_event_and_the_socket_stays_open(tmp_path: Path, upstream: FakeUpstream) -> None:
    with fresh_database() as dsn, postgres_behind_proxy(dsn) as (proxied, proxy):
        with served("server", _config(tmp_path, upstream, proxied)) as client, client.responses.connect() as connection:
            for away in (False, True, False):
                (proxy.cut if away else proxy.restore)()
                connection.response.create(model="fake/fake-model", input="[tokens:2] over the socket")
                last = next(event for event in connection if event.type in ("response.completed", "response.failed", "error"))
                if away:
                    assert last.type == "error"
                    assert (last.status, last.error.type, last.error.code) == (503, "service_unavailable", "storage_unavailable")
                else:
                    assert last.type == "response.completed"
