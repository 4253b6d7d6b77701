"""The built-in batches provider: OpenAI's Batch API over the stack's own endpoints, durable in
the configured database (`batches` store) and run by `runner.Runner` in the process that holds
each batch's lease. Every process sweeps for batches whose runner died (its lease lapsed, or its
process on this host is gone) and takes them over: a restart, or another replica, resumes them."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from contract.batches.protocol import BATCH_ENDPOINTS
from contract.caller import current_principal
from contract.checks import validate_metadata
from contract.errors import InvalidRequestError
from contract.files.protocol import FilesProvider
from contract.ids import random_hex
from contract.spec import Api, ProviderContext, ProviderSpec
from providers.batches.config import BuiltinBatchesConfig
from providers.batches.runner import Runner
from providers.batches.store import BatchStore

__all__ = ["BUILTIN", "BuiltinBatches", "BuiltinBatchesConfig"]

log = logging.getLogger("stack")

WINDOWS = {"24h": 24 * 3600}


class BuiltinBatches:
    """Implements contract.batches.protocol.BatchesProvider."""

    def __init__(self, store: BatchStore, files: FilesProvider, runner: Runner, config: BuiltinBatchesConfig) -> None:
        self.store = store
        self.files = files
        self.runner = runner
        self.config = config

    async def create_batch(self, body: dict[str, Any]) -> dict[str, Any]:
        endpoint, window, file_id = _checked(body)
        metadata = body.get("metadata")
        validate_metadata(metadata)
        expires = body.get("output_expires_after")
        if expires is not None and not (isinstance(expires, dict) and expires.get("anchor") == "created_at"
                                        and isinstance(expires.get("seconds"), int) and 3600 <= expires["seconds"] <= 2_592_000):
            raise InvalidRequestError("Invalid 'output_expires_after': expected {\"anchor\": \"created_at\", \"seconds\": 3600 to 2592000}.",
                                      param="output_expires_after", code="invalid_value")
        upload = await self.files.get_file(file_id)  # another's, or none: its 404
        if upload.get("purpose") != "batch":
            raise InvalidRequestError(f"The file '{file_id}' has purpose '{upload.get('purpose')}': a batch's input file must be uploaded "
                                      "with purpose 'batch'.", param="input_file_id", code="invalid_file_purpose")
        now = int(time.time())
        batch: dict[str, Any] = {
            "id": f"batch_{random_hex(16)}", "object": "batch", "endpoint": endpoint, "errors": None, "input_file_id": file_id,
            "completion_window": window, "status": "validating", "output_file_id": None, "error_file_id": None, "created_at": now,
            "in_progress_at": None, "expires_at": now + int(self.config.window_s or WINDOWS[window]), "finalizing_at": None,
            "completed_at": None, "failed_at": None, "expired_at": None, "cancelling_at": None, "cancelled_at": None,
            "request_counts": {"total": 0, "completed": 0, "failed": 0}, "metadata": metadata, "model": None, "usage": None,
            "output_expires_after": expires,
        }
        await self.store.insert(batch, current_principal())
        self.runner.start(batch["id"])
        return _public(batch)

    async def get_batch(self, batch_id: str) -> dict[str, Any]:
        stored = await self.store.get(batch_id)
        if stored.status == "in_progress":  # the counts so far, from the results recorded
            completed, failed, _, _ = await self.store.counts(batch_id)
            counts = stored.batch.get("request_counts") or {}
            stored.batch["request_counts"] = {"total": counts.get("total", 0), "completed": completed, "failed": failed}
        return _public(stored.batch)

    async def list_batches(self, after: str | None, limit: int) -> tuple[list[dict[str, Any]], bool]:
        batches, more = await self.store.page(after, limit)
        return [_public(batch) for batch in batches], more

    async def cancel_batch(self, batch_id: str) -> dict[str, Any]:
        for _ in range(5):  # the runner may move it on meanwhile: try again from what it became
            stored = await self.store.get(batch_id, "update")
            if stored.status not in ("validating", "in_progress"):
                if stored.status in ("finalizing", "completed", "failed", "expired"):
                    raise InvalidRequestError(f"The batch '{batch_id}' is {stored.status}: it cannot be cancelled.", param="batch_id",
                                              code="invalid_state")
                return _public(stored.batch)  # cancelling, cancelled: as it is
            batch = {**stored.batch, "status": "cancelling", "cancelling_at": int(time.time())}
            if await self.store.save(batch, only_if_status=stored.status):
                if stored.status == "validating" or batch_id not in self.runner.tasks:
                    self.runner.start(batch_id)  # a runner that is gone: this process finalizes it
                return _public(batch)
        return _public((await self.store.get(batch_id)).batch)

    async def sweep(self) -> None:
        """Take over and resume the open batches whose runner died."""
        for stored in await self.store.lapsed(self.config.lease_s):
            if stored.id not in self.runner.tasks and await self.store.claim(stored):
                log.info("batch %s: taken over from %s", stored.id, stored.owner or "no process")
                self.runner.start(stored.id)

    async def sweep_forever(self) -> None:
        while True:
            with contextlib.suppress(Exception):  # a store that does not answer: the next sweep tries again
                await self.sweep()
            await asyncio.sleep(self.config.lease_s / 2)


def _checked(body: dict[str, Any]) -> tuple[str, str, str]:
    known = {"input_file_id", "endpoint", "completion_window", "metadata", "output_expires_after"}
    for name in body:
        if name not in known:
            raise InvalidRequestError(f"Unknown parameter: '{name}'.", param=name, code="unknown_parameter")
    for name in ("input_file_id", "endpoint", "completion_window"):
        if not isinstance(body.get(name), str) or not body[name]:
            raise InvalidRequestError(f"Missing required parameter: '{name}'.", param=name, code="missing_required_parameter")
    if body["endpoint"] not in BATCH_ENDPOINTS:
        raise InvalidRequestError(f"Invalid 'endpoint': {body['endpoint']!r}. Supported values are: "
                                  f"{', '.join(repr(e) for e in BATCH_ENDPOINTS)}.", param="endpoint", code="invalid_value")
    if body["completion_window"] not in WINDOWS:
        raise InvalidRequestError(f"Invalid 'completion_window': {body['completion_window']!r}. Supported values are: '24h'.",
                                  param="completion_window", code="invalid_value")
    return body["endpoint"], body["completion_window"], body["input_file_id"]


def _public(batch: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in batch.items() if key != "output_expires_after"}


@contextlib.asynccontextmanager
async def create(context: ProviderContext[BuiltinBatchesConfig]) -> AsyncIterator[BuiltinBatches]:
    config = context.config
    store = BatchStore(context.databases("batches"))
    await store.create_tables()
    runner = Runner(store, context.deps[Api.files], context.loopback, config)
    batches = BuiltinBatches(store, context.deps[Api.files], runner, config)
    sweeper = asyncio.create_task(batches.sweep_forever(), name="batches sweep")
    try:
        yield batches
    finally:
        sweeper.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sweeper
        await runner.close()


BUILTIN = ProviderSpec(
    api=Api.batches,
    name="builtin",
    config_model=BuiltinBatchesConfig,
    factory=create,
    requires=(Api.files,),
    description="OpenAI's Batch API over the stack's own endpoints, durable across restarts",
)
