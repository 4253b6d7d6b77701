"""Model routing, as a specification: which provider a model id reaches, and with which name."""

from __future__ import annotations

import base64
import json
import struct
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from builder.config import ModelConfig, SqliteBackend
from contract.inference.protocol import UpstreamModel, UpstreamRequest
from runtime.apis.inference.router import InferenceRouter
from runtime.apis.inference.store import ChatCompletionStore
from contract.errors import InvalidRequestError, NotFoundError, UpstreamError
from runtime.storage import Sql, open_database


class FakeProvider:
    """An in-process inference provider that answers with what it was asked."""

    def __init__(self, name: str, models: list[str], down: bool = False) -> None:
        self.name, self.model_ids, self.down = name, models, down
        self.requests: list[UpstreamRequest] = []

    async def list_models(self) -> list[UpstreamModel]:
        if self.down:
            raise UpstreamError(f"{self.name} could not reach http://127.0.0.1:9/v1/models", code="upstream_unreachable")
        return [UpstreamModel(model_id) for model_id in self.model_ids]

    async def chat_completion(self, request: UpstreamRequest) -> bytes:
        self.requests.append(request)
        return json.dumps({"id": f"chatcmpl-{len(self.requests)}", "created": 1, "model": request.body["model"], "provider": self.name,
                           "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}]}).encode()

    async def stream_chat_completion(self, request: UpstreamRequest) -> AsyncIterator[bytes]:
        self.requests.append(request)
        for piece in ("a", "b"):
            yield json.dumps({"id": "chatcmpl-s", "created": 1, "model": "m", "choices": [{"index": 0, "delta": {"content": piece}}]}).encode()

    async def embeddings(self, request: UpstreamRequest) -> bytes:
        self.requests.append(request)
        return json.dumps({"object": "list", "data": [{"object": "embedding", "index": 0, "embedding": [0.5, -1.0]}], "model": "e"}).encode()


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[ChatCompletionStore]:
    db = open_database(SqliteBackend(type="sqlite", path=tmp_path / "s.db"))
    store = ChatCompletionStore(db)
    await store.create_tables()
    yield store
    await db.close()


async def make_router(store: ChatCompletionStore, *providers: FakeProvider, registered: list[ModelConfig] | None = None) -> InferenceRouter:
    router = InferenceRouter({p.name: p for p in providers}, registered or [], store)
    await router.refresh_models()
    return router


async def test_every_model_is_listed_as_provider_slash_model_provider_by_provider(store: ChatCompletionStore) -> None:
    # In run.yaml's order (the starter's remote providers come before its local models), then by id.
    router = await make_router(store, FakeProvider("vllm", ["llama"]), FakeProvider("openai", ["llama", "gpt"]))
    assert [entry.id for entry in router.models()] == ["vllm/llama", "openai/gpt", "openai/llama"]


async def test_a_bare_name_routes_when_exactly_one_provider_serves_it(store: ChatCompletionStore) -> None:
    vllm, openai = FakeProvider("vllm", ["llama"]), FakeProvider("openai", ["gpt", "llama"])
    router = await make_router(store, vllm, openai)
    await router.chat_completion({"model": "gpt", "messages": []})
    assert openai.requests[-1].body["model"] == "gpt"
    with pytest.raises(NotFoundError):
        await router.resolve("llama")  # served by two providers: ambiguous


async def test_the_prefix_is_removed_before_the_request_goes_upstream(store: ChatCompletionStore) -> None:
    vllm = FakeProvider("vllm", ["llama"])
    router = await make_router(store, vllm)
    await router.chat_completion({"model": "vllm/llama", "messages": []}, b"raw")
    assert vllm.requests[-1].body["model"] == "llama"
    assert vllm.requests[-1].raw is None  # the body changed, so the client's bytes are not forwarded


async def test_client_bytes_are_forwarded_when_the_model_needs_no_renaming(store: ChatCompletionStore) -> None:
    vllm = FakeProvider("vllm", ["llama"])
    router = await make_router(store, vllm)
    await router.chat_completion({"model": "llama", "messages": []}, b"raw")
    assert vllm.requests[-1].payload() == b"raw"


async def test_registered_models_use_their_own_id_and_upstream_name(store: ChatCompletionStore) -> None:
    vllm = FakeProvider("vllm", [])
    router = await make_router(store, vllm, registered=[ModelConfig(model_id="fast", provider_id="vllm", provider_model_id="llama-8b")])
    assert [entry.id for entry in router.models()] == ["fast"]
    await router.chat_completion({"model": "fast", "messages": []})
    assert vllm.requests[-1].body["model"] == "llama-8b"


async def test_an_unknown_model_is_a_404_listing_the_available_ids(store: ChatCompletionStore) -> None:
    router = await make_router(store, FakeProvider("vllm", ["llama"]))
    with pytest.raises(NotFoundError) as error:
        await router.resolve("gpt-5")
    assert error.value.message == "The model 'gpt-5' does not exist or is not served here. Available models: vllm/llama"
    assert (error.value.param, error.value.code) == ("model", "model_not_found")


async def test_a_provider_that_is_down_is_reported_not_fatal(store: ChatCompletionStore) -> None:
    router = await make_router(store, FakeProvider("vllm", ["llama"]), FakeProvider("ollama", ["qwen"], down=True))
    assert [entry.id for entry in router.models()] == ["vllm/llama"]
    health = router.health()
    assert health["vllm"]["status"] == "ok"
    assert health["ollama"]["status"] == "unavailable" and "could not reach" in health["ollama"]["detail"]


async def test_an_unlisted_model_of_a_named_provider_is_still_routed(store: ChatCompletionStore) -> None:
    vllm = FakeProvider("vllm", [])
    router = await make_router(store, vllm)
    await router.chat_completion({"model": "vllm/new-model", "messages": []})
    assert vllm.requests[-1].body["model"] == "new-model"


async def test_an_unknown_model_refreshes_the_list_once_before_failing(store: ChatCompletionStore) -> None:
    vllm = FakeProvider("vllm", [])
    router = await make_router(store, vllm)
    vllm.model_ids.append("late")
    router.catalog._last_refresh = 0.0  # as if the last refresh were long ago
    assert (await router.resolve("late")).id == "vllm/late"


async def test_store_true_saves_the_completion_and_store_false_does_not(store: ChatCompletionStore) -> None:
    router = await make_router(store, FakeProvider("vllm", ["llama"]))
    answer = json.loads(await router.chat_completion(
        {"model": "llama", "messages": [{"role": "user", "content": "x"}], "store": True, "metadata": {"k": "v"}}))
    await router.chat_completion({"model": "llama", "messages": [{"role": "user", "content": "y"}]})
    stored, has_more = await store.page(after=None, limit=10, order="asc", model=None, metadata={})
    assert [item["id"] for item in stored] == [answer["id"]] and not has_more
    assert stored[0]["metadata"] == {"k": "v"}
    assert await store.messages(answer["id"]) == [{"role": "user", "content": "x"}]


async def test_a_stored_completion_is_known_by_an_id_of_ours_not_the_upstreams(store: ChatCompletionStore) -> None:
    # Upstreams reuse ids (Ollama's come from 999 values): two completions the upstream gave the
    # same id are two stored completions, neither overwriting the other.
    class SameId(FakeProvider):
        async def chat_completion(self, request: UpstreamRequest) -> bytes:
            text = request.body["messages"][0]["content"]
            return json.dumps({"id": "chatcmpl-123", "created": 1, "model": "llama",
                               "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]}).encode()

    router = await make_router(store, SameId("ollama", ["llama"]))
    answers = [json.loads(await router.chat_completion(
        {"model": "llama", "messages": [{"role": "user", "content": text}], "store": True, "metadata": {"who": text}}))
        for text in ("alice", "bob")]
    assert answers[0]["id"] != answers[1]["id"] and all(a["id"].startswith("chatcmpl-") and a["id"] != "chatcmpl-123" for a in answers)
    for answer, text in zip(answers, ("alice", "bob")):
        stored = await store.get(answer["id"])
        assert stored["choices"][0]["message"]["content"] == text and stored["metadata"] == {"who": text}
    row = await store.db.read_one(Sql("SELECT upstream_id FROM chat_completions LIMIT 1"))
    assert row is not None and row[0] == "chatcmpl-123"


async def test_a_stored_stream_is_saved_folded_when_it_ends(store: ChatCompletionStore) -> None:
    router = await make_router(store, FakeProvider("vllm", ["llama"]))
    ids = []
    for _ in range(2):  # the fake upstream names every stream chatcmpl-s
        chunks = await router.stream_chat_completion({"model": "llama", "messages": [{"role": "user", "content": "x"}], "store": True})
        received = [json.loads(chunk) async for chunk in chunks]
        assert len(received) == 2 and len({chunk["id"] for chunk in received}) == 1
        ids.append(received[0]["id"])
    assert ids[0] != ids[1] and "chatcmpl-s" not in ids
    for completion_id in ids:
        saved = await store.get(completion_id)
        assert saved["id"] == completion_id and saved["choices"][0]["message"]["content"] == "ab"


async def test_a_stored_completion_names_the_model_as_the_client_did(store: ChatCompletionStore) -> None:
    router = await make_router(store, FakeProvider("vllm", ["llama"]))
    answer = json.loads(await router.chat_completion({"model": "vllm/llama", "messages": [{"role": "user", "content": "x"}], "store": True}))
    assert answer["model"] == "vllm/llama" and (await store.get(answer["id"]))["model"] == "vllm/llama"
    chunks = await router.stream_chat_completion({"model": "vllm/llama", "messages": [{"role": "user", "content": "x"}], "store": True})
    received = [json.loads(chunk) async for chunk in chunks]
    assert {chunk["model"] for chunk in received} == {"vllm/llama"}
    assert (await store.get(received[0]["id"]))["model"] == "vllm/llama"


async def test_base64_embeddings_are_encoded_from_the_upstream_floats(store: ChatCompletionStore) -> None:
    vllm = FakeProvider("vllm", ["embed"])
    router = await make_router(store, vllm)
    result = json.loads(await router.embeddings({"model": "embed", "input": "x", "encoding_format": "base64"}))
    assert vllm.requests[-1].body["encoding_format"] == "float"
    assert struct.unpack("<2f", base64.b64decode(result["data"][0]["embedding"])) == (0.5, -1.0)


class TextProvider(FakeProvider):
    """A provider that also serves the legacy completions API."""

    async def completion(self, request: UpstreamRequest) -> bytes:
        self.requests.append(request)
        return json.dumps({"id": "cmpl-1", "object": "text_completion", "model": request.body["model"],
                           "choices": [{"index": 0, "text": "hi", "finish_reason": "stop", "logprobs": None}]}).encode()

    async def stream_completion(self, request: UpstreamRequest) -> AsyncIterator[bytes]:
        self.requests.append(request)
        for piece in ("a", "b"):
            yield json.dumps({"id": "cmpl-s", "object": "text_completion", "model": request.body["model"],
                              "choices": [{"index": 0, "text": piece, "finish_reason": None, "logprobs": None}]}).encode()


async def test_a_legacy_completion_reaches_its_provider_with_the_upstreams_name_and_answers_with_the_clients(
        store: ChatCompletionStore) -> None:
    text = TextProvider("vllm", ["llama"])
    router = await make_router(store, text)
    raw = b'{"model":"llama","prompt":"x"}'
    assert await router.text_completion({"model": "llama", "prompt": "x"}, raw) == await text.completion(UpstreamRequest({"model": "llama"}))
    assert text.requests[0].raw == raw  # the client's own bytes, untouched
    answer = json.loads(await router.text_completion({"model": "vllm/llama", "prompt": "x"}))
    assert answer["model"] == "vllm/llama" and text.requests[-1].body["model"] == "llama"
    chunks = [json.loads(chunk) async for chunk in await router.stream_text_completion({"model": "vllm/llama", "prompt": "x", "stream": True})]
    assert [chunk["choices"][0]["text"] for chunk in chunks] == ["a", "b"] and {chunk["model"] for chunk in chunks} == {"vllm/llama"}


async def test_a_provider_without_the_legacy_api_is_a_400_naming_the_model(store: ChatCompletionStore) -> None:
    router = await make_router(store, FakeProvider("plugin", ["chatty"]))
    for call in (router.text_completion, router.stream_text_completion):
        with pytest.raises(InvalidRequestError) as refused:
            await call({"model": "chatty", "prompt": "x"})
        assert refused.value.code == "unsupported_model" and "'chatty'" in refused.value.message and "/v1/chat/completions" in refused.value.message
