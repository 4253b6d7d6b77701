"""The built-in vector stores provider: chunks and their full-text index in the configured
database (`vector_stores` store), ingestion as durable jobs, keyword search that needs no model."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from pydantic import BaseModel, ConfigDict, Field

from providers.spec import Api, ProviderContext, ProviderSpec
from providers.vector_stores.builtin.ingest import Ingestor
from providers.vector_stores.builtin.provider import BuiltinVectorStores
from providers.vector_stores.builtin.tables import create_tables

__all__ = ["BUILTIN", "BuiltinVectorStores", "BuiltinVectorStoresConfig"]


class BuiltinVectorStoresConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ingestion_workers: int = Field(default=2, ge=1, le=64, description="Files ingested at once by this process")
    lease_s: float = Field(default=30.0, gt=0, description="How long a worker's claim on a file lasts unless renewed; a file whose "
                                                           "worker died is taken up again after it")
    poll_s: float = Field(default=2.0, gt=0, description="How often idle workers look for files left by other processes")


@contextlib.asynccontextmanager
async def create(context: ProviderContext[BuiltinVectorStoresConfig]) -> AsyncIterator[BuiltinVectorStores]:
    db = context.databases("vector_stores")
    await create_tables(db)
    config = context.config
    ingestor = Ingestor(db, context.deps[Api.files], workers=config.ingestion_workers, lease_s=config.lease_s, poll_s=config.poll_s)
    await ingestor.start()
    try:
        yield BuiltinVectorStores(db, context.deps[Api.files], ingestor)
    finally:
        await ingestor.stop()


BUILTIN = ProviderSpec(
    api=Api.vector_stores,
    name="builtin",
    config_model=BuiltinVectorStoresConfig,
    factory=create,
    requires=(Api.files,),
    description="Vector stores in the configured database: durable ingestion, keyword search through its full-text index",
)
