"""Embeddings with no key and no download: wordllama's static model, shipped in its wheel."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from providers.inference.local.packaged import packaged_file, require_module
from providers.inference.local.worker import ModelWorker
from contract.spec import Api, ProviderContext, ProviderSpec
from contract import fastjson
from contract.inference.protocol import UpstreamModel, UpstreamRequest
from contract.errors import InvalidRequestError

__all__ = ["WORDLLAMA", "WordLlamaEmbeddings"]

DIMENSIONS = (64, 128, 256)  # what the shipped 256-dimension weights truncate to (Matryoshka)


class WordLlamaConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model_id: str = Field(default="wordllama-l2-supercat", min_length=1, description="The id the model is listed under")
    dimensions: int = Field(default=256, description="Default size of the vectors (64, 128 or 256); a request may ask for fewer")
    max_queue: int = Field(default=64, ge=0, description="Requests that may wait while one is embedded; more are refused with a 503")
    preload: bool = Field(default=True, description="Load the model at start-up on its own thread (false: on first use)")


class WordLlamaEmbeddings:
    """An inference provider that serves one embedding model and no chat."""

    def __init__(self, config: WordLlamaConfig) -> None:
        if config.dimensions not in DIMENSIONS:
            raise ValueError(f"dimensions must be one of {DIMENSIONS}, not {config.dimensions}")
        self.config = config
        self.worker = ModelWorker(config.model_id, _load, config.max_queue)

    async def list_models(self) -> list[UpstreamModel]:
        return [UpstreamModel(self.config.model_id, owned_by="wordllama", model_type="embedding", dimensions=self.config.dimensions)]

    async def chat_completion(self, request: UpstreamRequest) -> bytes:
        raise _not_chat(self.config.model_id)

    async def stream_chat_completion(self, request: UpstreamRequest) -> AsyncIterator[bytes]:
        raise _not_chat(self.config.model_id)
        yield b""  # an async generator, for the protocol

    async def embeddings(self, request: UpstreamRequest) -> bytes:
        body = request.body
        texts = _texts(body.get("input"))
        dimensions = body.get("dimensions") or self.config.dimensions
        if not isinstance(dimensions, int) or not 1 <= dimensions <= self.config.dimensions:
            raise InvalidRequestError(f"Invalid 'dimensions': this model gives at most {self.config.dimensions}.", param="dimensions",
                                      code="invalid_value")
        vectors, tokens = await self.worker.call(lambda model: _embed(model, texts, dimensions))
        return fastjson.dumps({
            "object": "list", "model": self.config.model_id,
            "data": [{"object": "embedding", "index": index, "embedding": vector} for index, vector in enumerate(vectors)],
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        })


def _load() -> Any:
    """The shipped weights and tokenizer, found through the package's file list. (wordllama's own
    `WordLlama.load` looks for its tokenizer in a `tokenizer/` folder while the wheel ships it in
    `tokenizers/`, and then turns to the network.)"""
    from safetensors import safe_open
    from tokenizers import Tokenizer
    from wordllama.inference import WordLlamaInference  # type: ignore[import-untyped]

    weights = packaged_file("wordllama", "weights/l2_supercat_256.safetensors")
    tokenizer = packaged_file("wordllama", "tokenizers/l2_supercat_tokenizer_config.json")
    with safe_open(str(weights), framework="np", device="cpu") as tensors:
        embedding = tensors.get_tensor("embedding.weight")
    return WordLlamaInference(embedding, Tokenizer.from_file(str(tokenizer)))


def _embed(model: Any, texts: list[str], dimensions: int) -> tuple[list[list[float]], int]:
    import numpy

    vectors = model.embed(texts, norm=False)[:, :dimensions]
    norms = numpy.linalg.norm(vectors, axis=1, keepdims=True)
    vectors = vectors / numpy.where(norms == 0, 1.0, norms)  # unit length after truncation, as OpenAI's are
    tokens = sum(len(encoding.ids) for encoding in model.tokenize(texts))
    return vectors.tolist(), tokens


def _texts(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value and all(isinstance(item, str) for item in value):
        return value
    raise InvalidRequestError("Invalid 'input': this model embeds a string or a list of strings (not tokens).", param="input",
                              code="invalid_value")


def _not_chat(model_id: str) -> InvalidRequestError:
    return InvalidRequestError(f"The model '{model_id}' is an embedding model: it answers /v1/embeddings only.", param="model",
                               code="invalid_value")


@contextlib.asynccontextmanager
async def create(context: ProviderContext[WordLlamaConfig]) -> AsyncIterator[WordLlamaEmbeddings]:
    require_module("wordllama", "wordllama")
    provider = WordLlamaEmbeddings(context.config)
    if context.config.preload:
        provider.worker.preload()
    try:
        yield provider
    finally:
        provider.worker.close()


WORDLLAMA = ProviderSpec(
    api=Api.inference,
    name="wordllama",
    config_model=WordLlamaConfig,
    factory=create,
    pip_packages=("wordllama>=0.4",),
    description="Embeddings in process, no key and no download: wordllama's static model shipped in its package (256 dimensions)",
    sample_config={},
)
