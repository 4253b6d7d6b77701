"""A store's embedding model as the ingestion and the search use it: one vector per text, of the
store's size; transient upstream failures retried; anything else a reason for `last_error`."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest

from providers.vector_stores.builtin import embedding
from providers.vector_stores.builtin.embedding import EmbeddingError, EmbeddingModel, probe
from contract.errors import InvalidRequestError, UpstreamError


class Upstream:
    """Answers embeddings calls with vectors of `size`, after failing `failures` of them."""

    def __init__(self, size: int = 3, failures: list[Exception] | None = None) -> None:
        self.size = size
        self.failures = failures or []
        self.bodies: list[Mapping[str, Any]] = []

    async def embeddings(self, body: Mapping[str, Any], raw: bytes | None = None) -> bytes:
        self.bodies.append(body)
        if self.failures:
            raise self.failures.pop(0)
        size = body.get("dimensions", self.size)
        data = [{"object": "embedding", "index": i, "embedding": [float(i)] * size} for i, _ in enumerate(body["input"])]
        return json.dumps({"object": "list", "data": list(reversed(data))}).encode()


@pytest.fixture(autouse=True)
def no_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(embedding, "RETRIES", (0.0, 0.0, 0.0))


async def test_vectors_come_back_in_the_texts_order() -> None:
    vectors = await EmbeddingModel("m", 3).embed(Upstream(), ["a", "b"])
    assert vectors == [[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]]


async def test_a_store_that_asked_for_a_size_asks_it_of_every_call() -> None:
    upstream = Upstream()
    await EmbeddingModel("m", 2, send_dimension=True).embed(upstream, ["a"])
    assert upstream.bodies[0]["dimensions"] == 2 and upstream.bodies[0]["encoding_format"] == "float"


async def test_transient_failures_are_retried_and_lasting_ones_say_why() -> None:
    upstream = Upstream(failures=[UpstreamError("busy", status_code=503), UpstreamError("slow down", status_code=429)])
    assert len(await EmbeddingModel("m", 3).embed(upstream, ["a"])) == 1 and len(upstream.bodies) == 3
    down = Upstream(failures=[UpstreamError("down", status_code=502)] * 4)
    with pytest.raises(EmbeddingError, match="'m' failed: down .after 4 attempts"):
        await EmbeddingModel("m", 3).embed(down, ["a"])
    refused = Upstream(failures=[InvalidRequestError("too long", param="input")])
    with pytest.raises(EmbeddingError, match="too long"):
        await EmbeddingModel("m", 3).embed(refused, ["a"])
    assert len(refused.bodies) == 1  # a client error is not retried


async def test_vectors_of_another_size_fail_the_file() -> None:
    with pytest.raises(EmbeddingError, match="vectors of 3 dimensions; the store's are 4"):
        await EmbeddingModel("m", 4).embed(Upstream(size=3), ["a"])


async def test_the_probe_finds_the_size_and_names_the_field_at_fault() -> None:
    assert await probe(Upstream(size=5), "m", None) == EmbeddingModel("m", 5, False)
    assert await probe(Upstream(size=5), "m", 2) == EmbeddingModel("m", 2, True)
    with pytest.raises(InvalidRequestError) as refused:
        await probe(Upstream(failures=[InvalidRequestError("no", param="dimensions")]), "m", 9000)
    assert refused.value.param == "embedding_dimension"
    with pytest.raises(InvalidRequestError) as unknown:
        await probe(Upstream(failures=[InvalidRequestError("no such model", param="model")]), "m", None)
    assert unknown.value.param == "embedding_model"
