"""Background responses, cancels, disconnects and crashes, against the live fake upstream
(replayed answers arrive at once, so nothing would still be running to cancel)."""

from __future__ import annotations

import concurrent.futures
import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest

from fake_upstream.server import FakeUpstream
from runtime.testing.targets import StackTarget, free_port
from support.live import CONFIG, healthy, live_env, start_server, wait_for
from support.scenarios import concurrent_turns_keep_their_blocks

def test_a_background_response_is_queued_then_completes(client: openai.OpenAI) -> None:
    queued = client.responses.create(model="fake-model", input="[tokens:5] [slow:20]", background=True)
    assert queued.status == "queued" and queued.background is True
    wait_for(lambda: client.responses.retrieve(queued.id).status == "completed")
    done = client.responses.retrieve(queued.id)
    assert done.output_text == "tok1 tok2 tok3 tok4 tok5"


def test_a_running_background_response_can_be_streamed_and_resumed(client: openai.OpenAI) -> None:
    queued = client.responses.create(model="fake-model", input="[tokens:10] [slow:50]", background=True)
    events = list(client.responses.retrieve(queued.id, stream=True))
    assert events[0].type == "response.created" and events[-1].type == "response.completed"
    assert [event.sequence_number for event in events] == list(range(len(events)))
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == "tok1 tok2 tok3 tok4 tok5 tok6 tok7 tok8 tok9 tok10"
    resumed = list(client.responses.retrieve(queued.id, stream=True, starting_after=5))
    assert [event.sequence_number for event in resumed] == list(range(6, len(events)))


def test_a_background_response_can_be_streamed_as_it_is_created_and_resumed_after(client: openai.OpenAI) -> None:
    stream = client.responses.create(model="fake-model", input="[tokens:8] [slow:20]", background=True, stream=True)
    events = list(stream)
    assert events[0].type == "response.created" and events[-1].type == "response.completed"
    assert [event.sequence_number for event in events] == list(range(len(events)))
    assert events[-1].response.background is True and events[-1].response.output_text == "tok1 tok2 tok3 tok4 tok5 tok6 tok7 tok8"
    resumed = list(client.responses.retrieve(events[0].response.id, stream=True, starting_after=4))
    assert [event.sequence_number for event in resumed] == list(range(5, len(events)))


def test_a_streamed_background_response_goes_on_when_its_client_leaves(client: openai.OpenAI) -> None:
    stream = client.responses.create(model="fake-model", input="[tokens:30] [slow:30]", background=True, stream=True)
    response_id = ""
    for event in stream:
        if event.type == "response.created":
            response_id = event.response.id
        if event.type == "response.output_text.delta":
            break
    stream.close()
    wait_for(lambda: client.responses.retrieve(response_id).status == "completed")
    assert client.responses.retrieve(response_id).output_text.endswith("tok30")


def test_a_background_response_can_be_cancelled_and_stays_cancelled(client: openai.OpenAI) -> None:
    queued = client.responses.create(model="fake-model", input="[tokens:40] [slow:100]", background=True)
    wait_for(lambda: client.responses.retrieve(queued.id).status == "in_progress")
    time.sleep(0.5)
    cancelled = client.responses.cancel(queued.id)
    assert cancelled.status == "cancelled"
    time.sleep(0.5)
    stored = client.responses.retrieve(queued.id)
    assert stored.status == "cancelled"
    assert stored.output and stored.output[0].status == "incomplete"  # what was produced is kept
    assert client.responses.cancel(queued.id).status == "cancelled"  # idempotent


def test_only_background_responses_can_be_cancelled(client: openai.OpenAI) -> None:
    response = client.responses.create(model="fake-model", input="done")
    with pytest.raises(openai.BadRequestError) as error:
        client.responses.cancel(response.id)
    assert error.value.code == "not_cancellable"
    assert "Cannot cancel a synchronous response" in error.value.message and "cannot be cancelled" in error.value.message


def test_a_client_that_disconnects_mid_stream_leaves_a_cancelled_response_with_its_output(client: openai.OpenAI) -> None:
    stream = client.responses.create(model="fake-model", input="[tokens:60] [slow:50]", stream=True)
    response_id = ""
    for event in stream:
        if event.type == "response.created":
            response_id = event.response.id
        if event.type == "response.output_text.delta" and event.delta == " tok3":
            break
    stream.close()
    wait_for(lambda: client.responses.retrieve(response_id).status != "in_progress")
    stored = client.responses.retrieve(response_id)
    assert stored.status == "cancelled"
    assert stored.output_text.startswith("tok1 tok2 tok3")


def test_concurrent_responses_on_one_conversation_keep_their_blocks(live: StackTarget) -> None:
    """Live upstream: which turns a response sees depends on timing, so no recording fits."""
    concurrent_turns_keep_their_blocks(live.async_openai(max_retries=0), turns=8)


def test_queued_and_interrupted_background_responses_are_recovered_after_a_crash(upstream: FakeUpstream, tmp_path: Path) -> None:
    """kill -9 the server with a background response running; the next server marks it failed
    once its lease lapses, and a response queued behind it is run."""
    env = live_env(upstream, tmp_path, STACK_TEST_LEASE_S="2")
    port = free_port()
    base = f"http://127.0.0.1:{port}/v1"
    first = start_server(env, port)
    try:
        wait_for(lambda: healthy(base))
        running = httpx2.post(f"{base}/responses", json={"model": "fake-model", "input": "[tokens:200] [slow:100]", "background": True}).json()
        wait_for(lambda: httpx2.get(f"{base}/responses/{running['id']}").json()["status"] == "in_progress")
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    second = start_server(env, port)
    try:
        wait_for(lambda: healthy(base))
        wait_for(lambda: httpx2.get(f"{base}/responses/{running['id']}").json()["status"] == "failed", timeout=20)
        failed = httpx2.get(f"{base}/responses/{running['id']}").json()
        assert "server stopped" in failed["error"]["message"]
    finally:
        second.send_signal(signal.SIGTERM)
        second.wait(timeout=20)


def _kill_mid_stream(env: dict[str, str], port: int) -> str:
    """Start a server, stream a stored response from it and kill -9 it once text is flowing (the
    response `in_progress`); the response's id."""
    base = f"http://127.0.0.1:{port}/v1"
    first = start_server(env, port)
    try:
        wait_for(lambda: healthy(base))
        body = {"model": "fake-model", "input": "[tokens:200] [slow:100]", "stream": True}
        with httpx2.stream("POST", f"{base}/responses", json=body, timeout=10) as stream:
            lines = stream.iter_lines()
            created = next(line for line in lines if line.startswith("data: ") and '"response.created"' in line)
            response_id: str = json.loads(created[6:])["response"]["id"]
            next(line for line in lines if '"response.output_text.delta"' in line)
            assert httpx2.get(f"{base}/responses/{response_id}").json()["status"] == "in_progress"
            first.send_signal(signal.SIGKILL)
            first.wait()
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    return response_id


def test_a_streamed_response_cut_by_a_crash_is_marked_failed_by_the_next_server(upstream: FakeUpstream, tmp_path: Path) -> None:
    """kill -9 the server in the middle of a stored stream: the response its client saw created
    does not stay `in_progress`; once the dead process's lease lapses it is `failed`."""
    env = live_env(upstream, tmp_path, STACK_TEST_LEASE_S="2")
    port = free_port()
    base = f"http://127.0.0.1:{port}/v1"
    response_id = _kill_mid_stream(env, port)
    second = start_server(env, port)
    try:
        wait_for(lambda: healthy(base))
        wait_for(lambda: httpx2.get(f"{base}/responses/{response_id}").json()["status"] == "failed", timeout=20)
        failed = httpx2.get(f"{base}/responses/{response_id}").json()
        assert failed["error"] == {"code": "server_error", "message": "The server stopped while this response was being streamed."}
    finally:
        second.send_signal(signal.SIGTERM)
        second.wait(timeout=20)


def test_streams_still_running_at_the_end_of_a_graceful_shutdown_end_with_a_last_event(upstream: FakeUpstream, tmp_path: Path) -> None:
    """SIGTERM with a stored response stream, a chat stream and a plain chat request under way, each
    longer than the grace period: before it ends, the response's client gets `response.failed`
    saying why (and the response is stored so, with what it produced), the chat stream's client an
    error event, the plain request a 503 in OpenAI's shape; no connection is simply cut, and the
    server exits cleanly."""
    env = live_env(upstream, tmp_path, STACK_TEST_SHUTDOWN_GRACE_S="2")
    port = free_port()
    base = f"http://127.0.0.1:{port}/v1"
    slow = "[tokens:200] [slow:100]"
    first = start_server(env, port)
    try:
        wait_for(lambda: healthy(base))
        with httpx2.stream("POST", f"{base}/responses", json={"model": "fake-model", "input": slow, "stream": True}, timeout=10) as answer, \
                httpx2.stream("POST", f"{base}/chat/completions", json={"model": "fake-model", "stream": True,
                                                                         "messages": [{"role": "user", "content": slow}]}, timeout=10) as chat:
            events = (json.loads(line[6:]) for line in answer.iter_lines() if line.startswith("data: "))
            chunks = (line[6:] for line in chat.iter_lines() if line.startswith("data: "))
            created = next(events)
            next(event for event in events if event["type"] == "response.output_text.delta")
            next(chunks)
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                # A plain request whose answer takes longer than the grace period.
                waiting = pool.submit(httpx2.post, f"{base}/chat/completions", timeout=10,
                                      json={"model": "fake-model", "messages": [{"role": "user", "content": "[slow:8000] hi"}]})
                time.sleep(0.3)
                first.send_signal(signal.SIGTERM)
                rest = list(events)
                chat_rest = list(chunks)
                unanswered = waiting.result()
        assert rest[-1]["type"] == "response.failed"
        failed = rest[-1]["response"]
        assert failed["status"] == "failed"
        assert failed["error"] == {"code": "server_error", "message": "The server shut down before this response finished."}
        assert [event["sequence_number"] for event in rest] == list(range(rest[0]["sequence_number"], rest[-1]["sequence_number"] + 1))
        assert json.loads(chat_rest[-1])["error"]["code"] == "server_shutting_down"
        assert unanswered.status_code == 503 and unanswered.json()["error"]["code"] == "server_shutting_down"
        assert first.wait(timeout=15) == 0
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    second = start_server(env, port)
    try:
        wait_for(lambda: healthy(base))
        stored = httpx2.get(f"{base}/responses/{created['response']['id']}").json()
        assert stored["status"] == "failed" and stored["error"] == failed["error"]
        assert stored["output"][0]["content"][0]["text"].startswith("tok1 tok2")  # what was produced is kept
    finally:
        second.send_signal(signal.SIGTERM)
        second.wait(timeout=20)


def test_a_restart_on_the_same_host_takes_a_crashed_processs_responses_over_at_once(upstream: FakeUpstream, tmp_path: Path) -> None:
    """kill -9 mid-stream with a lease of a minute: the next server on this host sees that the
    process holding the lease is gone and marks the response failed at start-up, not a minute later."""
    env = live_env(upstream, tmp_path, STACK_TEST_LEASE_S="60")
    port = free_port()
    base = f"http://127.0.0.1:{port}/v1"
    response_id = _kill_mid_stream(env, port)
    second = start_server(env, port)
    try:
        started = time.monotonic()
        wait_for(lambda: healthy(base))
        assert httpx2.get(f"{base}/responses/{response_id}").json()["status"] == "failed"  # already, at start-up
        assert time.monotonic() - started < 30
    finally:
        second.send_signal(signal.SIGTERM)
        second.wait(timeout=20)


def test_a_queued_background_response_left_by_a_dead_process_is_run_at_start(upstream: FakeUpstream, tmp_path: Path) -> None:
    import asyncio

    from builder.config import SqliteBackend
    from contract.items import normalize_input
    from contract.responses.models import CreateResponse, response_object
    from providers.responses.store import ResponseStore
    from runtime.library_client import LibraryClient
    from runtime.storage import Sql, open_database

    request = CreateResponse(model="fake-model", input="left behind", background=True)
    queued = response_object(request, "resp_left_behind", "queued")

    async def leave_queued() -> None:
        db = open_database(SqliteBackend(type="sqlite", path=tmp_path / "integration" / "stack.db"))
        store = ResponseStore(db)
        await store.create_tables()
        await store.insert(queued, ancestors=[], input_items=normalize_input(request.input), request=request.model_dump(mode="json"))
        await db.write_one(Sql("UPDATE responses SET heartbeat_at = 0.0"))  # its process died long ago
        await db.close()

    asyncio.run(leave_queued())
    with LibraryClient(CONFIG, env=live_env(upstream, tmp_path, STACK_TEST_LEASE_S="2")) as stack:
        client = stack.openai(max_retries=0)
        wait_for(lambda: client.responses.retrieve("resp_left_behind").status == "completed")
        assert client.responses.retrieve("resp_left_behind").output_text == "You said: left behind"


def test_a_chain_continues_after_a_restart_with_the_same_context(upstream: FakeUpstream, tmp_path: Path) -> None:
    """A chain's context comes from memory while its process lives, and from the store after a
    restart: both give the upstream the same messages."""
    from runtime.library_client import LibraryClient

    env = live_env(upstream, tmp_path)
    with LibraryClient(CONFIG, env=env) as stack:
        client = stack.openai(max_retries=0)
        first = client.responses.create(model="fake-model", input="alpha beta", instructions="ignored later")
        second = client.responses.create(model="fake-model", input="gamma", previous_response_id=first.id)
        in_memory = client.responses.create(model="fake-model", input="delta", previous_response_id=second.id)
    with LibraryClient(CONFIG, env=env) as stack:
        client = stack.openai(max_retries=0)
        from_store = client.responses.create(model="fake-model", input="delta", previous_response_id=second.id)
    assert in_memory.usage is not None and from_store.usage is not None
    assert from_store.usage.input_tokens == in_memory.usage.input_tokens == 2 + 4 + 1 + 3 + 1
    assert upstream.bodies()[-1]["messages"] == upstream.bodies()[-2]["messages"]


def test_a_stream_that_stalls_after_it_started_fails_within_the_gap(upstream: FakeUpstream, tmp_path: Path) -> None:
    """A model may take long to its first chunk (timeout_s), but once streaming, a gap longer
    than stream_gap_timeout_s fails the stream instead of holding it for the whole timeout."""
    from builder.load import parse_config
    from builder.resolve import resolve
    from runtime.library_client import LibraryClient

    env = live_env(upstream, tmp_path)
    document = {"version": 1, "name": "gaps", "providers": {
        "inference": [{"provider_id": "fake", "provider_type": "openai", "config": {
            "base_url": upstream.base_url, "api_key": "k", "timeout_s": 30, "stream_gap_timeout_s": 0.4}}],
        "responses": [{"provider_id": "builtin", "provider_type": "builtin"}]}}
    with LibraryClient(resolve(parse_config(document, env), env)) as stack:
        client = stack.openai(max_retries=0)
        # The fake sends each chunk 1 s after the previous one: the first is awaited, the second stalls.
        with pytest.raises(openai.APIError, match="stalled"):
            list(client.chat.completions.create(model="fake-model", messages=[{"role": "user", "content": "[tokens:5] [slow:1000]"}],
                                                stream=True))
        with pytest.raises(openai.APIError, match="stalled"):  # before any output: the error itself, as for chat
            list(client.responses.create(model="fake-model", input="[tokens:5] [slow:1000]", stream=True))
        # Steady chunks within the gap go through.
        steady = list(client.chat.completions.create(model="fake-model", messages=[{"role": "user", "content": "[tokens:3] [slow:100]"}],
                                                     stream=True))
        assert "".join(chunk.choices[0].delta.content or "" for chunk in steady if chunk.choices) == "tok1 tok2 tok3"


@pytest.mark.parametrize("what", ["chat stream before its first chunk", "non-streamed chat", "non-streamed response"])
def test_a_client_that_leaves_cancels_the_upstream_call(live: StackTarget, upstream: FakeUpstream, what: str) -> None:
    """Nobody would read the answer: the upstream call is cancelled, not left to run its course."""
    before = len(upstream.abandoned)
    client = live.openai(max_retries=0, timeout=0.5)  # the client gives up after half a second
    with pytest.raises(openai.APITimeoutError):
        if what == "chat stream before its first chunk":
            stream = client.chat.completions.create(model="fake-model", messages=[{"role": "user", "content": "[tokens:3] [slow:4000]"}],
                                                    stream=True)
            list(stream)
        elif what == "non-streamed chat":
            client.chat.completions.create(model="fake-model", messages=[{"role": "user", "content": "[slow:4000] hi"}])
        else:
            client.responses.create(model="fake-model", input="[slow:4000] a long think")
    client.close()
    wait_for(lambda: len(upstream.abandoned) > before, timeout=3)  # well before the 4 s answer
    assert upstream.abandoned[-1] == "/v1/chat/completions"


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_service_tier_reaches_the_upstream_and_the_response_says_which_served_it(client: openai.OpenAI, upstream: FakeUpstream,
                                                                               stream: bool) -> None:
    if stream:
        with client.responses.stream(model="fake-model", input="tiered", service_tier="auto") as events:
            response = events.get_final_response()
    else:
        response = client.responses.create(model="fake-model", input="tiered", service_tier="auto")
    assert upstream.bodies()[-1]["service_tier"] == "auto"
    assert response.service_tier == "default"  # what the upstream says it served "auto" at, as OpenAI does
    assert client.responses.retrieve(response.id).service_tier == "default"
    flex = client.responses.create(model="fake-model", input="tiered", service_tier="flex")
    assert flex.service_tier == "flex" and upstream.bodies()[-1]["service_tier"] == "flex"


def test_a_function_output_with_an_image_reaches_the_model_right_after_its_call(client: openai.OpenAI, upstream: FakeUpstream) -> None:
    """OpenAI allows image and file parts in a function's output; chat models need each call's
    result straight after it, even when the client sent a user message first."""
    import io

    from fake_mcp.servers import PNG

    image_id = client.files.create(file=("screen.png", io.BytesIO(PNG)), purpose="user_data").id
    asked = client.responses.create(model="fake-model", input="[tool:shot {}] look", tools=[
        {"type": "function", "name": "shot", "parameters": {"type": "object", "properties": {}}}])
    [call] = [item for item in asked.output if item.type == "function_call"]
    answered = client.responses.create(model="fake-model", previous_response_id=asked.id, input=[
        {"role": "user", "content": "quickly"},
        {"type": "function_call_output", "call_id": call.call_id, "output": [
            {"type": "input_text", "text": "here it is"}, {"type": "input_image", "file_id": image_id}]},
    ])
    assert answered.status == "completed"
    messages = upstream.bodies()[-1]["messages"]
    roles = [message["role"] for message in messages]
    assert roles[-4:] == ["assistant", "tool", "user", "user"]
    assert messages[-3] == {"role": "tool", "tool_call_id": call.call_id, "content": "here it is"}
    image = messages[-2]["content"][1]
    assert image["type"] == "image_url" and image["image_url"]["url"].startswith("data:image/png;base64,")
    assert messages[-1]["content"] == "quickly"
    [stored] = [item for item in client.responses.input_items.list(answered.id).data if item.type == "function_call_output"]
    assert stored.output[1].file_id == image_id  # type: ignore[union-attr,index]  # the stored input keeps the id


def _ws_events(socket: Any) -> Iterator[dict[str, Any]]:
    while True:
        yield json.loads(socket.recv(timeout=15))


def test_a_graceful_shutdown_drains_websockets(upstream: FakeUpstream, tmp_path: Path) -> None:
    """SIGTERM with three WebSocket connections: one idle, one whose response ends within the grace
    period, one whose response outlives it. The idle one is closed at once with 1012; the short
    response finishes (response.completed) before its connection closes; the long one gets
    response.failed saying why at the end of the grace period; then each closes with 1012 (uvicorn
    alone would cut every one at the signal, with no last event)."""
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.client import connect

    env = live_env(upstream, tmp_path, STACK_TEST_SHUTDOWN_GRACE_S="3")
    port = free_port()
    base = f"http://127.0.0.1:{port}/v1"
    server = start_server(env, port)
    try:
        wait_for(lambda: healthy(base))
        url = f"ws://127.0.0.1:{port}/v1/responses"
        with connect(url) as idle, connect(url) as short, connect(url) as long:
            short.send(json.dumps({"type": "response.create", "model": "fake-model", "input": "[tokens:12] [slow:100]"}))
            long.send(json.dumps({"type": "response.create", "model": "fake-model", "input": "[tokens:200] [slow:100]"}))
            short_events, long_events = _ws_events(short), _ws_events(long)
            seen_short = [next(short_events) for _ in range(4)]
            seen_long = [next(long_events) for _ in range(4)]
            signalled = time.monotonic()
            server.send_signal(signal.SIGTERM)
            with pytest.raises(ConnectionClosed) as idle_closed:
                idle.recv(timeout=5)
            assert idle_closed.value.rcvd is not None and idle_closed.value.rcvd.code == 1012
            assert time.monotonic() - signalled < 1.5  # at once, not at the end of the grace period
            for events, seen in ((short_events, seen_short), (long_events, seen_long)):
                with pytest.raises(ConnectionClosed) as closed:
                    for event in events:
                        seen.append(event)
                assert closed.value.rcvd is not None and closed.value.rcvd.code == 1012
        assert seen_short[-1]["type"] == "response.completed"
        assert seen_long[-1]["type"] == "response.failed"
        assert seen_long[-1]["response"]["error"] == {"code": "server_error", "message": "The server shut down before this response finished."}
        assert [event["sequence_number"] for event in seen_long] == list(range(len(seen_long)))
        assert server.wait(timeout=15) == 0
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
