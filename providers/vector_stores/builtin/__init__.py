"""The built-in vector stores provider: chunks, their full-text index and their vectors in the
configured database (`vector_stores` store), ingestion as durable jobs, keyword search that needs
no model and hybrid search (vectors and keywords, fused) for stores with an embedding model."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator

from pydantic import BaseModel, ConfigDict, Field

from contract.spec import Api, ProviderContext, ProviderSpec
from providers.vector_stores.builtin.ingest import Ingestor
from providers.vector_stores.builtin.provider import BuiltinVectorStores
from providers.vector_stores.builtin.tables import create_tables
from providers.vector_stores.builtin.vectors import require_pgvector
from runtime.storage import every

__all__ = ["BUILTIN", "BuiltinVectorStores", "BuiltinVectorStoresConfig"]

log = logging.getLogger("stack")


class BuiltinVectorStoresConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ingestion_workers: int = Field(default=2, ge=1, le=64, description="Files ingested at once by this process")
    lease_s: float = Field(default=30.0, gt=0, description="How long a worker's claim on a file lasts unless renewed; a file whose "
                                                           "worker died is taken up again after it")
    poll_s: float = Field(default=2.0, gt=0, description="How often idle workers look for files left by other processes")
    embedding_model: str | None = Field(default=None, min_length=1, description=(
        "The model that embeds the chunks of stores created without `embedding_model` of their own: any model of the inference "
        "API that serves /v1/embeddings (e.g. `wordllama-l2-supercat`, in process). With none, such stores are searched by keyword "
        "only. On PostgreSQL, vectors need the pgvector extension"))
    embedding_dimension: int | None = Field(default=None, ge=1, le=16_000, description=(
        "The size of those vectors, asked of the model (`dimensions`); default: the model's own"))
    attach_wait_s: float = Field(default=1.0, ge=0, le=30, description=(
        "How long attaching files (one, a batch, or a new store's) waits for their ingestion before it answers: a file done by "
        "then is answered `completed`, any other `in_progress` (to be polled, as at OpenAI). 0 answers at once"))
    sweep_s: float = Field(default=60.0, gt=0, description=(
        "How often files that expired or were deleted in the Files API without the stores being told are taken out of every store"))


@contextlib.asynccontextmanager
async def create(context: ProviderContext[BuiltinVectorStoresConfig]) -> AsyncIterator[BuiltinVectorStores]:
    db = context.databases("vector_stores")
    await create_tables(db)
    config = context.config
    inference = context.deps.get(Api.inference)
    if config.embedding_model is not None:
        if inference is None:
            raise ValueError("embedding_model needs an inference provider that serves it; run.yaml configures none")
        await require_pgvector(db)
    ingestor = Ingestor(db, context.deps[Api.files], inference, workers=config.ingestion_workers, lease_s=config.lease_s,
                        poll_s=config.poll_s)
    await ingestor.start()
    provider = BuiltinVectorStores(db, context.deps[Api.files], ingestor, inference, config.embedding_model, config.embedding_dimension,
                                   config.attach_wait_s)
    sweeper = every(config.sweep_s, lambda: _forget_gone_files(provider), "the sweep of files gone from the Files API", at_once=True)
    try:
        yield provider
    finally:
        sweeper.cancel()
        await ingestor.stop()


async def _forget_gone_files(provider: BuiltinVectorStores) -> None:
    gone = await provider.forget_gone_files()
    if gone:
        log.info("files expired or deleted in the Files API, taken out of every vector store: %s", ", ".join(gone))


BUILTIN = ProviderSpec(
    api=Api.vector_stores,
    name="builtin",
    config_model=BuiltinVectorStoresConfig,
    factory=create,
    requires=(Api.files,),
    optional=(Api.inference,),
    description="Vector stores in the configured database: durable ingestion, keyword search through its full-text index, "
                "hybrid search with an embedding model (sqlite-vec, pgvector)",
)
