"""Record-replay transports, exercised through httpx2 clients against a fake OpenAI upstream."""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest

from runtime.recording import (
    MODE_ENV,
    RecordingMode,
    RecordingTransport,
    ReplayMissError,
    ReplayTransport,
    default_mode,
    recording_transport,
    request_key,
)

UPSTREAM = "http://127.0.0.1:40123"
CHAT = {"model": "m1", "messages": [{"role": "user", "content": "What is 2+2?"}], "temperature": 0.7}
STREAM_WORDS = ["Hel", "lo", " world"]


def completion(text: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "m1",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
    }


def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
    body = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m1"}
    body["choices"] = [{"index": 0, "delta": delta, "finish_reason": finish}]
    return json.dumps(body)


class Upstream:
    """A fake OpenAI-compatible server behind `httpx2.MockTransport`, counting its calls."""

    def __init__(self) -> None:
        self.calls = 0
        self.gate: asyncio.Event | None = None  # when set up, the stream waits on it after one event
        self.cut_after: int | None = None  # when set, the stream fails after this many events

    def transport(self) -> httpx2.MockTransport:
        return httpx2.MockTransport(self.handle)

    async def handle(self, request: httpx2.Request) -> httpx2.Response:
        self.calls += 1
        if request.url.path == "/v1/limited":
            headers = {"retry-after": "7", "x-ratelimit-remaining": "0"}
            return httpx2.Response(429, headers=headers, json={"error": {"message": "slow down"}})
        if request.method == "GET":
            return httpx2.Response(200, json={"object": "list", "data": [{"id": "m1", "object": "model"}]})
        body = json.loads(request.content)
        if body.get("stream"):
            return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=self.events())
        return httpx2.Response(200, json=completion(f"answer #{self.calls}"))

    async def events(self) -> AsyncIterator[bytes]:
        payloads = [chunk({"role": "assistant", "content": ""})]
        payloads += [chunk({"content": word}) for word in STREAM_WORDS]
        payloads += [chunk({}, "stop"), "[DONE]"]
        for index, data in enumerate(payloads):
            if index == self.cut_after:
                raise httpx2.RemoteProtocolError("peer closed connection without sending complete message body")
            if index == 1 and self.gate is not None:
                await self.gate.wait()
            yield f"data: {data}\n\n".encode()


@pytest.fixture
def upstream() -> Upstream:
    return Upstream()


def client(upstream: Upstream, mode: RecordingMode, directory: Path, base_url: str = UPSTREAM) -> httpx2.AsyncClient:
    transport = recording_transport(upstream.transport(), mode, directory)
    return httpx2.AsyncClient(transport=transport, base_url=base_url)


async def post(http: httpx2.AsyncClient, body: dict[str, Any], **kwargs: Any) -> httpx2.Response:
    return await http.post("/v1/chat/completions", json=body, **kwargs)


def recordings(directory: Path) -> list[Path]:
    return sorted(directory.iterdir())


def load_response(path: Path) -> dict[str, Any]:
    response: dict[str, Any] = json.loads(path.read_text())["response"]
    return response


# --- JSON exchanges ----------------------------------------------------------------------------


async def test_json_exchange_is_recorded_then_replayed_without_the_upstream(upstream: Upstream, tmp_path: Path) -> None:
    async with client(upstream, "record", tmp_path) as http:
        recorded = await post(http, CHAT)
    async with client(upstream, "replay", tmp_path) as http:
        replayed = await post(http, CHAT)

    assert upstream.calls == 1
    assert replayed.status_code == recorded.status_code == 200
    assert replayed.json() == recorded.json() == completion("answer #1")
    assert replayed.headers["content-type"] == "application/json"


async def test_host_port_auth_header_and_trailing_slash_do_not_change_the_key(upstream: Upstream, tmp_path: Path) -> None:
    async with client(upstream, "record", tmp_path) as http:
        await post(http, CHAT, headers={"Authorization": "Bearer sk-one"})
    async with client(upstream, "replay", tmp_path, base_url="https://elsewhere.test:9999") as http:
        response = await http.post("/v1/chat/completions/", json=CHAT, headers={"Authorization": "Bearer sk-two"})

    assert response.json() == completion("answer #1")
    assert upstream.calls == 1


async def test_query_is_part_of_the_key_in_sorted_order(upstream: Upstream, tmp_path: Path) -> None:
    async with client(upstream, "record", tmp_path) as http:
        await http.get("/v1/models?b=2&a=1")
    async with client(upstream, "replay", tmp_path) as http:
        assert (await http.get("/v1/models?a=1&b=2")).status_code == 200
        with pytest.raises(ReplayMissError):
            await http.get("/v1/models?a=1")


async def test_replay_miss_names_request_nearest_recording_diff_and_command(
    upstream: Upstream, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with client(upstream, "record", tmp_path) as http:
        await post(http, CHAT)
        await post(http, {"model": "other", "messages": [{"role": "user", "content": "unrelated and long " * 20}]})
    changed = {**CHAT, "messages": [{"role": "user", "content": "What is 3+3?"}]}
    monkeypatch.setenv("PYTEST_CURRENT_TEST", "tests/unit/test_x.py::test_y[a b] (call)")

    async with client(upstream, "replay", tmp_path) as http:
        with pytest.raises(ReplayMissError) as caught:
            await post(http, changed)

    message = str(caught.value)
    key, _ = request_key("POST", "/v1/chat/completions", json.dumps(changed).encode())
    nearest = next(p.name for p in recordings(tmp_path) if json.loads(p.read_text())["request"]["body"]["model"] == "m1")
    assert caught.value.key == key and key in message
    assert 'POST /v1/chat/completions model=m1 last message: "What is 3+3?"' in message
    assert f"nearest recording for /v1/chat/completions: {nearest}" in message
    assert '\n    -        "content": "What is 2+2?",\n    +        "content": "What is 3+3?",\n' in message
    assert "STACK_RECORDING_MODE=record-if-missing .venv/bin/pytest 'tests/unit/test_x.py::test_y[a b]'" in message
    assert upstream.calls == 2


async def test_replay_miss_without_recordings_or_pytest(
    upstream: Upstream, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PYTEST_CURRENT_TEST")
    async with client(upstream, "replay", tmp_path / "none") as http:
        with pytest.raises(ReplayMissError) as caught:
            await post(http, CHAT)
    assert "no recording for /v1/chat/completions at all" in str(caught.value)
    assert "STACK_RECORDING_MODE=record-if-missing .venv/bin/pytest ..." in str(caught.value)
    assert upstream.calls == 0


async def test_replay_rescans_the_directory_on_a_miss(upstream: Upstream, tmp_path: Path) -> None:
    async with client(upstream, "replay", tmp_path) as replaying, client(upstream, "record", tmp_path) as recording:
        with pytest.raises(ReplayMissError):
            await post(replaying, CHAT)  # indexes the (empty) directory
        await post(recording, CHAT)  # written "by another process"
        assert (await post(replaying, CHAT)).json() == completion("answer #1")


async def test_upstream_error_is_replayed_with_status_headers_and_body(upstream: Upstream, tmp_path: Path) -> None:
    async with client(upstream, "record", tmp_path) as http:
        await http.post("/v1/limited", json={})
    async with client(upstream, "replay", tmp_path) as http:
        response = await http.post("/v1/limited", json={})

    assert response.status_code == 429
    assert response.headers["retry-after"] == "7"
    assert "x-ratelimit-remaining" not in response.headers
    assert response.json() == {"error": {"message": "slow down"}}
    assert upstream.calls == 1


async def test_compressed_upstream_body_is_recorded_and_passed_on_decoded(tmp_path: Path) -> None:
    def handler(request: httpx2.Request) -> httpx2.Response:
        headers = {"content-type": "application/json", "content-encoding": "gzip"}
        return httpx2.Response(200, headers=headers, content=gzip.compress(json.dumps(completion("zipped")).encode()))

    transport = RecordingTransport(httpx2.MockTransport(handler), tmp_path)
    async with httpx2.AsyncClient(transport=transport, base_url=UPSTREAM) as http:
        response = await post(http, CHAT)

    assert response.json() == completion("zipped") and "content-encoding" not in response.headers
    assert load_response(recordings(tmp_path)[0])["body"] == completion("zipped")


# --- streams -----------------------------------------------------------------------------------


async def read_raw(http: httpx2.AsyncClient, body: dict[str, Any]) -> list[bytes]:
    async with http.stream("POST", "/v1/chat/completions", json=body) as response:
        return [part async for part in response.aiter_raw()]


async def test_stream_is_recorded_as_chunks_and_replayed_event_by_event(upstream: Upstream, tmp_path: Path) -> None:
    body = {**CHAT, "stream": True}
    async with client(upstream, "record", tmp_path) as http:
        recorded = b"".join(await read_raw(http, body))
    async with client(upstream, "replay", tmp_path) as http:
        replayed = await read_raw(http, body)

    [path] = recordings(tmp_path)
    response = json.loads(path.read_text())["response"]
    assert response["chunks"][-1] == "[DONE]"
    assert json.loads(response["chunks"][1])["choices"][0]["delta"] == {"content": "Hel"}
    assert "body" not in response and "stream_error" not in response
    assert response["headers"] == {"content-type": "text/event-stream"}
    assert len(replayed) == len(response["chunks"]) == 6
    assert b"".join(replayed) == recorded
    assert upstream.calls == 1


async def test_recording_passes_stream_chunks_on_before_the_stream_ends(upstream: Upstream, tmp_path: Path) -> None:
    upstream.gate = asyncio.Event()
    async with client(upstream, "record", tmp_path) as http:
        async with http.stream("POST", "/v1/chat/completions", json={**CHAT, "stream": True}) as response:
            parts = response.aiter_raw()
            first = await asyncio.wait_for(anext(parts), 2)  # the upstream is still blocked
            assert first.startswith(b"data: ") and recordings(tmp_path) == []
            upstream.gate.set()
            rest = [part async for part in parts]
    assert len(rest) == 5
    assert len(recordings(tmp_path)) == 1


async def test_cut_stream_replays_the_same_error_at_the_same_point(upstream: Upstream, tmp_path: Path) -> None:
    upstream.cut_after = 3
    body = {**CHAT, "stream": True}
    seen: dict[str, list[bytes]] = {"record": [], "replay": []}
    for mode in ("record", "replay"):
        async with client(upstream, mode, tmp_path) as http:
            async with http.stream("POST", "/v1/chat/completions", json=body) as response:
                with pytest.raises(httpx2.RemoteProtocolError, match="peer closed connection"):
                    async for part in response.aiter_raw():
                        seen[mode].append(part)

    [path] = recordings(tmp_path)
    response = json.loads(path.read_text())["response"]
    assert response["stream_error"] == "RemoteProtocolError: peer closed connection without sending complete message body"
    assert len(response["chunks"]) == 3
    assert seen["replay"] == seen["record"]
    assert upstream.calls == 1


async def test_stream_closed_by_the_client_records_what_was_read(upstream: Upstream, tmp_path: Path) -> None:
    body = {**CHAT, "stream": True}
    async with client(upstream, "record", tmp_path) as http:
        async with http.stream("POST", "/v1/chat/completions", json=body) as response:
            async for _ in response.aiter_raw():
                break
    async with client(upstream, "replay", tmp_path) as http:
        async with http.stream("POST", "/v1/chat/completions", json=body) as response:
            with pytest.raises(httpx2.RemoteProtocolError, match="closed by client"):
                await response.aread()

    [path] = recordings(tmp_path)
    assert json.loads(path.read_text())["response"]["stream_error"] == "closed by client"


async def test_sse_events_with_names_comments_and_crlf_are_kept(tmp_path: Path) -> None:
    raw = ": keep-alive\r\n\r\nevent: response.created\r\ndata: {\"a\":\"é\"}\r\n\r\ndata: x\ndata: y\n\ndata: [DONE]\n".encode()
    pieces = [raw[i : i + 5] for i in range(0, len(raw), 5)]  # split across "\r\n" and UTF-8 boundaries

    async def events() -> AsyncIterator[bytes]:
        for piece in pieces:
            yield piece

    async def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=events())

    async with httpx2.AsyncClient(transport=RecordingTransport(httpx2.MockTransport(handler), tmp_path)) as http:
        await http.get(f"{UPSTREAM}/v1/responses/r1")
    async with httpx2.AsyncClient(transport=ReplayTransport(tmp_path)) as http:
        replayed = await http.get(f"{UPSTREAM}/v1/responses/r1")

    [path] = recordings(tmp_path)
    chunks = json.loads(path.read_text())["response"]["chunks"]
    assert chunks == [{"event": "response.created", "data": '{"a":"é"}'}, "x\ny", "[DONE]"]
    assert replayed.text == 'event: response.created\ndata: {"a":"é"}\n\ndata: x\ndata: y\n\ndata: [DONE]\n\n'


# --- modes ---------------------------------------------------------------------------------------


async def test_record_if_missing_records_once_then_replays(upstream: Upstream, tmp_path: Path) -> None:
    async with client(upstream, "record-if-missing", tmp_path) as http:
        first = await post(http, CHAT)
        second = await post(http, CHAT)
        other = await post(http, {**CHAT, "temperature": 0.2})
    assert first.json() == second.json() == completion("answer #1")
    assert other.json() == completion("answer #2")
    assert upstream.calls == 2
    assert len(recordings(tmp_path)) == 2


async def test_record_overwrites_an_existing_recording(upstream: Upstream, tmp_path: Path) -> None:
    async with client(upstream, "record", tmp_path) as http:
        await post(http, CHAT)
        await post(http, CHAT)
    async with client(upstream, "replay", tmp_path) as http:
        assert (await post(http, CHAT)).json() == completion("answer #2")
    assert len(recordings(tmp_path)) == 1


async def test_live_is_the_inner_transport_itself(upstream: Upstream, tmp_path: Path) -> None:
    inner = upstream.transport()
    assert recording_transport(inner, "live", tmp_path) is inner
    assert isinstance(recording_transport(inner, "replay", tmp_path), ReplayTransport)
    assert isinstance(recording_transport(inner, "record", tmp_path), RecordingTransport)
    with pytest.raises(ValueError, match="valid modes: live, record, replay, record-if-missing"):
        recording_transport(inner, "bogus", tmp_path)  # type: ignore[arg-type]
    async with client(upstream, "live", tmp_path) as http:
        await post(http, CHAT)
    assert upstream.calls == 1 and recordings(tmp_path) == []


def test_default_mode_reads_and_validates_the_environment() -> None:
    assert default_mode({}) == "live"
    assert default_mode({MODE_ENV: ""}, default="replay") == "replay"
    assert default_mode({MODE_ENV: "record-if-missing"}) == "record-if-missing"
    valid = "valid modes: live, record, replay, record-if-missing"
    with pytest.raises(ValueError, match=rf"STACK_RECORDING_MODE='recrod' .*{valid}"):
        default_mode({MODE_ENV: "recrod"})


# --- the key and the files -------------------------------------------------------------------------


def test_key_normalises_floats_json_formatting_and_paths() -> None:
    compact = b'{"model":"m","temperature":0.7,"top_p":1,"stop":null}'
    spaced = b'{ "stop": null, "top_p": 1.0, "temperature": 0.70000000000000001, "model": "m" }'
    key, canonical = request_key("post", "/v1/chat/completions/", compact)
    assert request_key("POST", "/v1/chat/completions", spaced)[0] == key
    body = {"model": "m", "temperature": 0.7, "top_p": 1, "stop": None}
    assert canonical == {"method": "POST", "path": "/v1/chat/completions", "body": body}
    assert request_key("POST", "/v1/chat/completions", compact.replace(b"0.7", b"0.71"))[0] != key
    assert request_key("GET", "/v1/models/", None) == request_key("GET", "/v1/models", b"")


def test_key_hashes_non_json_bodies_as_bytes() -> None:
    key, canonical = request_key("POST", "/v1/files", b"--boundary\r\nnot json")
    assert canonical["body_sha256"] == hashlib.sha256(b"--boundary\r\nnot json").hexdigest()
    assert "body" not in canonical
    assert request_key("POST", "/v1/files", b"--boundary\r\nnot json!")[0] != key


async def test_files_are_named_by_path_and_hash_and_are_readable(upstream: Upstream, tmp_path: Path) -> None:
    async with client(upstream, "record", tmp_path) as http:
        await post(http, CHAT)
    key, canonical = request_key("POST", "/v1/chat/completions", json.dumps(CHAT).encode())

    [path] = recordings(tmp_path)
    assert path.name == f"v1-chat-completions-{key[:12]}.json"
    text = path.read_text()
    record = json.loads(text)
    assert text == json.dumps(record, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    assert record["request"] == canonical
    headers = {"content-type": "application/json"}
    assert record["response"] == {"status": 200, "headers": headers, "body": completion("answer #1")}


async def test_concurrent_requests_write_whole_files_and_no_temp_files(upstream: Upstream, tmp_path: Path) -> None:
    bodies = [{**CHAT, "messages": [{"role": "user", "content": f"question {i}"}]} for i in range(20)]
    async with client(upstream, "record", tmp_path) as http:
        await asyncio.gather(*(post(http, body) for body in bodies))
        await asyncio.gather(*(read_raw(http, {**body, "stream": True}) for body in bodies[:5]))
    async with client(upstream, "replay", tmp_path) as http:
        replayed = await asyncio.gather(*(post(http, body) for body in bodies))

    paths = recordings(tmp_path)
    assert len(paths) == 25 and all(p.suffix == ".json" and not p.name.startswith(".") for p in paths)
    assert all(json.loads(p.read_text())["response"]["status"] == 200 for p in paths)
    answers = [r["body"]["choices"][0]["message"]["content"] for r in map(load_response, paths) if "body" in r]
    assert sorted(r.json()["choices"][0]["message"]["content"] for r in replayed) == sorted(answers)


# --- through the openai SDK ------------------------------------------------------------------------


async def chat_through_sdk(upstream: Upstream, mode: RecordingMode, directory: Path) -> tuple[str | None, str]:
    http = httpx2.AsyncClient(transport=recording_transport(upstream.transport(), mode, directory))
    sdk = openai.AsyncOpenAI(base_url="http://upstream.test/v1", api_key="x", http_client=http, max_retries=0)
    async with sdk:
        messages: Any = CHAT["messages"]
        reply = await sdk.chat.completions.create(model="m1", messages=messages)
        stream = await sdk.chat.completions.create(model="m1", messages=messages, stream=True)
        streamed = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    return reply.choices[0].message.content, streamed


async def test_openai_sdk_chat_records_then_replays(upstream: Upstream, tmp_path: Path) -> None:
    recorded = await chat_through_sdk(upstream, "record", tmp_path)
    replayed = await chat_through_sdk(upstream, "replay", tmp_path)

    assert recorded == replayed == ("answer #1", "Hello world")
    assert upstream.calls == 2
    streams = [json.loads(p.read_text())["response"] for p in recordings(tmp_path)]
    assert sorted("chunks" in r for r in streams) == [False, True]
    assert all("stream_error" not in r for r in streams)
