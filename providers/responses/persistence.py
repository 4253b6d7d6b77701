"""Storing what the engine produces, so that no stored response is left `in_progress` without a
live owner and none is half-written.

A response answered whole is stored once, when it is done (one transaction). A streamed one is
stored when it starts and again when it ends, whatever ends it, under a lease this process renews
while it streams: if the process dies, the lease lapses and another process's sweep marks the
response failed. When the database is away at the end, the client still gets every event; the end
is stored once the database is back (`STORE_RETRY_S`), this process keeping the lease meanwhile.
Then the context cache learns the finished turn, and its conversation is extended, each step once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

from providers.responses.context import ContextSource
from providers.responses.store import ResponseStore
from providers.responses.turn import Turn
from runtime.storage import StorageUnavailableError, when_back

__all__ = ["STORE_RETRY_S", "Persistence"]

log = logging.getLogger("stack")

STORE_RETRY_S = 600.0  # how long a response's end waits for the database to come back before the sweep is left to fail it


class Persistence:
    """The stored copies of the responses one engine produces, and their leases."""

    def __init__(self, store: ResponseStore, contexts: ContextSource, lease_s: float = 30.0) -> None:
        self.store = store
        self.contexts = contexts
        self.lease_s = lease_s
        # Stored responses this process is streaming to a client; their leases are renewed
        # together, so that if the process dies the sweep marks them failed.
        self._streaming: set[str] = set()
        # Responses that ended while the database was away, their end stored once it is back.
        self._persisting: set[str] = set()
        self._renewer: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()

    def is_holding(self, response_id: str) -> bool:
        """Whether this process holds the response's lease (streaming it, or waiting for the
        database to store its end)."""
        return response_id in self._streaming or response_id in self._persisting

    async def begin(self, turn: Turn) -> None:
        """A stored response streamed to its client: stored as it starts, under this process's lease."""
        await self.store.insert(dict(turn.response), ancestors=turn.ancestors, input_items=turn.input_items)
        self._streaming.add(turn.response["id"])
        self._renew()

    async def discard(self, turn: Turn) -> None:
        """A streamed response refused before its client saw any of it: nothing is kept."""
        await self.store.discard(turn.response["id"])

    def release(self, turn: Turn) -> None:
        """The stream is over: its lease is no longer renewed (its end is stored, or being stored)."""
        self._streaming.discard(turn.response["id"])

    async def save(self, turn: Turn) -> None:
        """A response answered whole, stored in one transaction once it is done."""
        if turn.stored:
            await self.store.insert(turn.response, ancestors=turn.ancestors, input_items=turn.input_items, output_items=turn.response["output"])
            self.contexts.remember(turn)
        await self.contexts.extend_conversation(turn)

    async def end(self, turn: Turn) -> None:
        """Store the end of a response stored as it started (streamed, or in the background)."""
        if not turn.stored:
            return
        done: set[str] = set()
        try:
            await self.store_end(turn, done)
        except StorageUnavailableError:
            # The database is away. Whoever streams the response has had every event of it: it
            # still ends as it ended, and its stored copy is written once the database is back,
            # this process keeping its lease meanwhile (so no sweep takes it for orphaned).
            self._persisting.add(turn.response["id"])
            self._renew()
            self.detach(self._store_end_when_back(turn, done))

    async def store_end(self, turn: Turn, done: set[str]) -> None:
        """Store the response's end, then add it to its conversation: each step once (`done`
        names those made), so that a step retried after an outage does not make another again."""
        if "finish" not in done:
            retried = "tried" in done
            done.add("tried")
            if turn.response["background"] and turn.response["status"] != "cancelled":
                # A background response may have been cancelled meanwhile: the cancel's status
                # wins, but the output produced so far is still kept. Unless a try before this one
                # landed, its answer lost with its connection (PostgreSQL): then it is what stays.
                if not await self.store.finish(turn.response, turn.response["output"], only_if_status=["in_progress"]) and not (
                        retried and (await self.store.get(turn.response["id"])).status == turn.response["status"]):
                    turn.response["status"] = "cancelled"
                    await self.store.finish(turn.response, turn.response["output"])
            else:
                await self.store.finish(turn.response, turn.response["output"])
            done.add("finish")
            self.contexts.remember(turn)
        if "conversation" not in done:
            await self.contexts.extend_conversation(turn)
            done.add("conversation")

    async def _store_end_when_back(self, turn: Turn, done: set[str]) -> None:
        response_id = turn.response["id"]
        try:
            await when_back(lambda: self.store_end(turn, done), within_s=STORE_RETRY_S)
            log.info("response %s stored once the database was back", response_id)
        except StorageUnavailableError:
            log.error("response %s could not be stored: the database stayed unavailable for %.0f s; the sweep marks it failed "
                      "once the database is back", response_id, STORE_RETRY_S)
        except Exception:
            log.exception("response %s could not be stored", response_id)
        finally:
            self._persisting.discard(response_id)

    def _renew(self) -> None:
        if self._renewer is None:
            self._renewer = asyncio.get_running_loop().create_task(self._renew_leases())

    async def _renew_leases(self) -> None:
        while True:
            await asyncio.sleep(self.lease_s / 3)
            if held := self._streaming | self._persisting:
                try:
                    await self.store.renew_leases(list(held))
                except StorageUnavailableError:
                    pass  # the storage layer has said so; the next round tries again
                except Exception:
                    log.exception("could not renew the leases of %d streamed responses", len(held))

    def detach(self, work: Coroutine[Any, Any, Any]) -> None:
        """Run `work` outside the current (possibly cancelled) task, and keep it until it ends."""
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def stop_renewing(self) -> None:
        """The process is stopping: its leases lapse from now on."""
        if self._renewer is not None:
            self._renewer.cancel()

    async def close(self) -> None:
        """Wait for the writes under way (ends stored outside a cancelled stream)."""
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=10)
