"""The engine's bookkeeping around a stream: leases, and what a peer process's sweep sees."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any


from builder.config import PostgresBackend, SqliteBackend
from providers.responses.builtin import assemble, close
from contract.responses.models import CreateResponse
from providers.responses.store import ResponseStore
from runtime.storage import Sql, open_database



class SlowModel:
    """The inference API at its boundary: a model that streams `tokens` chunks, `delay_s` apart."""

    def __init__(self, tokens: int, delay_s: float) -> None:
        self.tokens, self.delay_s = tokens, delay_s

    async def resolve(self, model_id: Any) -> Any:
        return model_id

    async def chat_completion(self, body: dict[str, Any], raw: bytes | None = None, *, echo_model: bool = True) -> bytes:
        raise AssertionError("not used")

    async def stream_chat_completion(self, body: dict[str, Any], raw: bytes | None = None, *, echo_model: bool = True) -> AsyncIterator[bytes]:
        async def chunks() -> AsyncIterator[bytes]:
            for index in range(self.tokens):
                await asyncio.sleep(self.delay_s)
                finish = "stop" if index == self.tokens - 1 else None
                yield json.dumps({"choices": [{"index": 0, "delta": {"content": f"t{index} "}, "finish_reason": finish}]}).encode()

        return chunks()


async def test_a_stream_longer_than_the_lease_keeps_it_and_no_peer_sweeps_it(backend: SqliteBackend | PostgresBackend) -> None:
    db = open_database(backend)
    store = ResponseStore(db)
    await store.create_tables()
    model = SlowModel(tokens=10, delay_s=0.2)  # 2 s, against a 0.9 s lease renewed every 0.3 s
    parts = assemble(model, store, lease_s=0.9)
    peer = assemble(model, store, lease_s=0.9)  # another process on the same database
    try:
        turn = await parts.preparation.prepare(CreateResponse(model="m", input="hello", stream=True))
        response_id = turn.response["id"]
        seen: list[str] = []
        leases: set[float] = set()
        async for event in parts.engine.stream(turn):
            if event["type"] == "response.output_text.delta":
                await peer.background.recover()
                seen.append((await store.get(response_id)).status)
                row = await db.read_one(Sql("SELECT heartbeat_at FROM responses WHERE id = :rid"), {"rid": response_id})
                assert row is not None
                leases.add(row[0])
        assert event["type"] == "response.completed"
        assert seen == ["in_progress"] * 10
        assert len(leases) >= 3  # renewed while it ran
        assert (await store.get(response_id)).status == "completed"
    finally:
        await close(parts)
        await close(peer)
        await db.close()


async def test_a_stream_whose_process_stopped_renewing_is_failed_by_a_peer(backend: SqliteBackend | PostgresBackend) -> None:
    db = open_database(backend)
    store = ResponseStore(db)
    await store.create_tables()
    parts = assemble(SlowModel(tokens=50, delay_s=0.05), store, lease_s=0.6)
    peer = assemble(SlowModel(tokens=1, delay_s=0), store, lease_s=0.6)
    try:
        turn = await parts.preparation.prepare(CreateResponse(model="m", input="hello", stream=True))
        stream = parts.engine.stream(turn)
        assert (await anext(stream))["type"] == "response.created"
        # The process "dies": nothing of it runs any more, its lease is not renewed.
        assert parts.persistence._renewer is not None
        parts.persistence._renewer.cancel()
        await asyncio.sleep(0.8)
        await peer.background.recover()
        failed = await store.get(turn.response["id"])
        assert failed.status == "failed"
        assert failed.response["error"]["message"] == "The server stopped while this response was being streamed."
        await stream.aclose()
    finally:
        await close(parts)
        await close(peer)
        await db.close()


async def test_a_queued_response_that_cannot_be_resumed_is_failed_and_the_sweep_goes_on(backend: SqliteBackend | PostgresBackend) -> None:
    from contract.responses.models import response_object
    from contract.items import normalize_input

    db = open_database(backend)
    store = ResponseStore(db)
    await store.create_tables()
    parts = assemble(SlowModel(tokens=1, delay_s=0), store, lease_s=1.0)
    requests = {
        "resp_context_gone": {"model": "m", "input": "hi", "background": True, "previous_response_id": "resp_deleted"},
        "resp_no_longer_valid": {"model": "m", "input": "hi", "background": True, "max_output_tokens": 5},
        "resp_fine": {"model": "m", "input": "hi", "background": True},
    }
    try:
        for response_id, body in requests.items():
            queued = response_object(CreateResponse.model_construct(**body), response_id, "queued")
            await store.insert(queued, ancestors=[], input_items=normalize_input("hi"), request=body)
        await db.write_one(Sql("UPDATE responses SET heartbeat_at = 0.0"))  # their process died long ago
        await parts.background.recover()
        gone = await store.get("resp_context_gone")
        assert gone.status == "failed" and "could not be resumed" in gone.response["error"]["message"]
        assert "resp_deleted" in gone.response["error"]["message"]
        invalid = await store.get("resp_no_longer_valid")
        assert invalid.status == "failed" and "no longer valid" in invalid.response["error"]["message"]
        for _ in range(100):  # the valid one was resumed and runs to its end
            if (await store.get("resp_fine")).status == "completed":
                break
            await asyncio.sleep(0.02)
        assert (await store.get("resp_fine")).status == "completed"
    finally:
        await close(parts)
        await db.close()


class BrokenModel(SlowModel):
    """A model whose stream breaks after its first token with an error that is not an APIError:
    a bug of the server's own or of a provider."""

    async def stream_chat_completion(self, body: dict[str, Any], raw: bytes | None = None, *, echo_model: bool = True) -> AsyncIterator[bytes]:
        async def chunks() -> AsyncIterator[bytes]:
            yield json.dumps({"choices": [{"index": 0, "delta": {"content": "t0 "}, "finish_reason": None}]}).encode()
            raise KeyError("a bug")

        return chunks()


async def test_a_stream_broken_by_a_fault_ends_failed_for_the_client_and_in_the_store(
        backend: SqliteBackend | PostgresBackend, caplog: Any) -> None:
    db = open_database(backend)
    store = ResponseStore(db)
    await store.create_tables()
    parts = assemble(BrokenModel(tokens=1, delay_s=0), store)
    try:
        turn = await parts.preparation.prepare(CreateResponse(model="m", input="hello", stream=True))
        events = [event async for event in parts.engine.stream(turn)]
        last = events[-1]
        assert last["type"] == "response.failed" and last["response"]["status"] == "failed"
        assert last["response"]["error"]["code"] == "server_error"
        assert "KeyError" not in json.dumps(events) and "a bug" not in json.dumps(events)  # the cause goes to the log only
        assert [event["sequence_number"] for event in events] == list(range(len(events)))
        stored = await store.get(turn.response["id"])
        assert stored.status == "failed" and stored.response["error"]["code"] == "server_error"
        assert "t0" in json.dumps(stored.response["output"])  # what was produced is kept
        assert any(turn.response["id"] in record.getMessage() and record.exc_info for record in caplog.records)

        queued = await parts.preparation.prepare(CreateResponse(model="m", input="hello", background=True))
        await parts.background.start(queued)
        for _ in range(200):
            ran = await store.get(queued.response["id"])
            if ran.status not in ("queued", "in_progress"):
                break
            await asyncio.sleep(0.01)
        assert ran.status == "failed" and ran.response["error"]["code"] == "server_error"  # not "cancelled": nobody cancelled it
    finally:
        await close(parts)
        await db.close()


async def test_a_background_end_tried_again_keeps_its_earlier_try_that_landed_but_not_over_a_cancel(
        backend: SqliteBackend | PostgresBackend) -> None:
    # After an outage the engine stores a response's end again (`store_end` with "tried" done): if
    # the earlier try committed though its answer was lost (PostgreSQL), that try is what stays;
    # a cancel that came meanwhile still wins.
    db = open_database(backend)
    store = ResponseStore(db)
    await store.create_tables()
    parts = assemble(SlowModel(tokens=1, delay_s=0), store, lease_s=5)
    try:
        for cancelled_meanwhile in (False, True):
            turn = await parts.preparation.prepare(CreateResponse(model="m", input="hello", background=True))
            await store.insert(dict(turn.response), ancestors=turn.ancestors, input_items=turn.input_items, request={})
            output = [{"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
                       "content": [{"type": "output_text", "text": "done", "annotations": []}]}]
            turn.response.update(status="completed", output=output)
            if cancelled_meanwhile:
                await store.set_status(turn.response["id"], "cancelled", {**turn.response, "status": "cancelled", "output": []},
                                       only_if_status=["queued"])
            else:  # the earlier try, landed
                await store.finish(turn.response, output, only_if_status=["queued", "in_progress"])
            await parts.persistence.store_end(turn, {"tried"})
            stored = await store.get(turn.response["id"])
            assert stored.status == ("cancelled" if cancelled_meanwhile else "completed")
            assert [item["id"] for item in await store.items_of(turn.response["id"], "output")] == ["msg_1"]  # the output kept either way
    finally:
        await close(parts)
        await db.close()
