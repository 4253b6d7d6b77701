"""Chunks and queries embedded by a model of the inference API: any provider's embeddings
(a remote OpenAI-compatible server, the in-process wordllama model), as the store asked."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from contract import fastjson
from contract.errors import APIError, InvalidRequestError

__all__ = ["EmbeddingError", "EmbeddingModel", "Embeddings", "model_columns", "model_of", "probe"]

RETRIES = (0.5, 2.0, 5.0)  # waits before trying a failed call again, when the upstream may recover


class Embeddings(Protocol):
    """What vector stores need of the inference API."""

    async def embeddings(self, body: Mapping[str, Any], raw: bytes | None = None) -> bytes: ...


class EmbeddingError(Exception):
    """The model could not embed the texts; `message` says why, for `last_error`."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True)
class EmbeddingModel:
    """A store's model: its id, the size of its vectors, and whether that size is asked of the
    model (`dimensions`) or is its own."""

    model: str
    dimension: int
    send_dimension: bool = False

    async def embed(self, inference: Embeddings, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text, each of `dimension` floats."""
        body: dict[str, Any] = {"model": self.model, "input": list(texts), "encoding_format": "float"}
        if self.send_dimension:
            body["dimensions"] = self.dimension
        for attempt, wait in enumerate((*RETRIES, None)):
            try:
                answer = await inference.embeddings(body)
                break
            except APIError as error:
                transient = error.status >= 500 or error.status == 429
                if not transient or wait is None:
                    raise EmbeddingError(f"The embedding model '{self.model}' failed: {error.message} "
                                         f"(after {attempt + 1} attempt{'s' if attempt else ''}).") from None
                await asyncio.sleep(wait)
        vectors = _vectors(answer, len(texts))
        if vectors is None:
            raise EmbeddingError(f"The embedding model '{self.model}' gave an answer that is not one vector per text.")
        wrong = next((len(vector) for vector in vectors if len(vector) != self.dimension), None)
        if wrong is not None:
            raise EmbeddingError(f"The embedding model '{self.model}' gave vectors of {wrong} dimensions; the store's are {self.dimension}.")
        return vectors


def model_of(row: Any) -> EmbeddingModel | None:
    """A store's model, from its row (the columns `model_columns` writes); None: keyword search only."""
    if not row["embedding_model"]:
        return None
    return EmbeddingModel(row["embedding_model"], int(row["embedding_dimension"]), bool(row["embedding_sends_dimension"]))


def model_columns(embedding: EmbeddingModel | None) -> dict[str, Any]:
    """A store row's columns for its model."""
    if embedding is None:
        return {"embedding_model": None, "embedding_dimension": None, "embedding_sends_dimension": None}
    return {"embedding_model": embedding.model, "embedding_dimension": embedding.dimension,
            "embedding_sends_dimension": embedding.send_dimension}


def _vectors(answer: bytes, count: int) -> list[list[float]] | None:
    try:
        data = fastjson.loads(answer).get("data")
        ordered = sorted(data, key=lambda item: item["index"])
        vectors = [[float(value) for value in item["embedding"]] for item in ordered]
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    return vectors if len(vectors) == count else None


async def probe(inference: Embeddings, model: str, dimension: int | None) -> EmbeddingModel:
    """The store's model, checked by embedding one text: a model that cannot embed, or that
    does not give the size asked for, is a 400 naming `embedding_model`/`embedding_dimension`."""
    body: dict[str, Any] = {"model": model, "input": ["dimension probe"], "encoding_format": "float"}
    if dimension is not None:
        body["dimensions"] = dimension
    try:
        vectors = _vectors(await inference.embeddings(body), 1)
    except APIError as error:
        if error.status >= 500:
            raise
        param = "embedding_dimension" if error.param == "dimensions" else "embedding_model"
        raise InvalidRequestError(f"Invalid '{param}': '{model}' cannot embed text here: {error.message}", param=param,
                                  code="invalid_value") from None
    if vectors is None or not vectors[0]:
        raise InvalidRequestError(f"Invalid 'embedding_model': '{model}' did not answer with an embedding.", param="embedding_model",
                                  code="invalid_value")
    size = len(vectors[0])
    if dimension is not None and size != dimension:
        raise InvalidRequestError(f"Invalid 'embedding_dimension': '{model}' gives vectors of {size} dimensions, not {dimension}.",
                                  param="embedding_dimension", code="invalid_value")
    return EmbeddingModel(model, size, dimension is not None)
