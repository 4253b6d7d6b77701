"""Background responses: stored as `queued`, produced by a task of this process after the request
returns, their events logged for `GET /v1/responses/{id}?stream=true`, cancellable from any
process, and taken over by the sweep (`recover`) when their process dies.

The request of a queued response is stored so that another process can resume it, without the
secrets of its tools (an MCP `authorization`, header values): a response whose request carried
some is produced by the process that accepted it, and if that process dies before starting it,
the sweep marks it failed rather than run its tools without their credentials.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from contract.errors import APIError, InvalidRequestError
from contract.responses.models import CreateResponse
from providers.responses.engine import ResponsesEngine
from providers.responses.persistence import STORE_RETRY_S
from providers.responses.preparation import Preparation
from providers.responses.store import ResponseStore, StoredResponse
from providers.responses.tools import public_tools
from providers.responses.translate import Event
from providers.responses.turn import Turn
from runtime.observability.metrics import current_metrics
from runtime.storage import StorageUnavailableError, when_back

__all__ = ["Background"]

log = logging.getLogger("stack")

TERMINAL = frozenset({"completed", "incomplete", "failed", "cancelled"})
SECRETS_REMOVED = "x_stack_secrets_removed"
"""Marks a stored request whose tools' secrets were left out: it cannot be resumed elsewhere."""
LOG_EVERY_S = 0.05
_LOGGED = ("response.output_item.", "response.completed", "response.failed", "response.incomplete", "response.created")


class Background:
    """The background responses of one engine: run by it, prepared again by `preparation` when
    another process's are taken over."""

    def __init__(self, engine: ResponsesEngine, preparation: Preparation, store: ResponseStore, lease_s: float = 30.0) -> None:
        self.engine = engine
        self.preparation = preparation
        self.store = store
        self.lease_s = lease_s
        self._tasks: dict[str, asyncio.Task[Any]] = {}
        self._watchers: dict[str, list[asyncio.Queue[Event | None]]] = {}

    def is_running(self, response_id: str) -> bool:
        return response_id in self._tasks

    async def start_streamed(self, turn: Turn) -> AsyncIterator[Event]:
        """Start it as `start` does, and stream its events as they are produced (`background`
        with `stream`). The response goes on if this stream's client leaves; it can be followed
        again with `GET /v1/responses/{id}?stream=true&starting_after=N`."""
        watcher: asyncio.Queue[Event | None] = asyncio.Queue()
        self._watchers.setdefault(turn.response["id"], []).append(watcher)
        try:
            await self.start(turn)
        except BaseException:
            self._unwatch(turn.response["id"], watcher)
            raise
        return self._watch(turn.response["id"], watcher)

    async def _watch(self, response_id: str, watcher: asyncio.Queue[Event | None]) -> AsyncIterator[Event]:
        try:
            while (event := await watcher.get()) is not None:
                yield event
        finally:
            self._unwatch(response_id, watcher)

    def _unwatch(self, response_id: str, watcher: asyncio.Queue[Event | None]) -> None:
        watchers = self._watchers.get(response_id, [])
        if watcher in watchers:
            watchers.remove(watcher)
        if not watchers:
            self._watchers.pop(response_id, None)

    async def start(self, turn: Turn) -> dict[str, Any]:
        """Store the response as queued and produce it after the request returns."""
        request = turn.request.model_dump(mode="json")
        request["tools"], secrets_removed = public_tools(turn.request, self.preparation.tools)
        if secrets_removed:
            request[SECRETS_REMOVED] = True
        await self.store.insert(dict(turn.response), ancestors=turn.ancestors, input_items=turn.input_items, request=request)
        self.spawn(turn)
        return dict(turn.response)

    def spawn(self, turn: Turn) -> None:
        response_id = turn.response["id"]
        task = asyncio.get_running_loop().create_task(self._run(turn))
        self._tasks[response_id] = task
        metrics = current_metrics()  # the task runs on in this context, whoever's request spawned it

        def done(_: asyncio.Task[None]) -> None:
            self._tasks.pop(response_id, None)
            if metrics is not None:
                metrics.background_queue.set(len(self._tasks))

        task.add_done_callback(done)
        if metrics is not None:
            metrics.background_queue.set(len(self._tasks))

    async def _run(self, turn: Turn) -> None:
        response_id = turn.response["id"]
        started = dict(turn.response, status="in_progress")
        if not await self.store.set_status(response_id, "in_progress", started, only_if_status=["queued"]):
            return  # cancelled before it started
        batch: list[Event] = []
        heartbeat = self._heartbeat(response_id)
        flushed = time.monotonic()
        away = False  # the database failed a write of this response's events
        try:
            async for event in self.engine.stream(turn):
                batch.append(event)
                for watcher in self._watchers.get(response_id, ()):
                    watcher.put_nowait(event)
                # Logged at each item's boundary, and at least every LOG_EVERY_S within an item,
                # so that a follower on another replica sees the text as it comes.
                if not away and (event["type"].startswith(_LOGGED) or time.monotonic() - flushed >= LOG_EVERY_S):
                    try:
                        await self.store.append_events(response_id, batch)
                    except StorageUnavailableError:
                        # The database is away: the response goes on, its events kept here until
                        # its end, not tried again meanwhile (each try on a network that drops
                        # packets would hold the response up to command_timeout_s).
                        away = True
                        continue
                    batch, flushed = [], time.monotonic()
            self._end_watchers(response_id)  # they have every event: not kept waiting for the database
            if batch:  # what the database was away for, logged once it is back
                await when_back(lambda: self.store.append_events(response_id, batch), within_s=STORE_RETRY_S)
        except asyncio.CancelledError:
            with contextlib.suppress(StorageUnavailableError):  # said by the storage layer; the response's end is stored apart
                await asyncio.shield(self.store.append_events(response_id, batch))
            raise
        except StorageUnavailableError:
            log.error("background response %s: %d events could not be logged, the database stayed unavailable for %.0f s",
                      response_id, len(batch), STORE_RETRY_S)
        finally:
            heartbeat.cancel()
            self._end_watchers(response_id)

    def _end_watchers(self, response_id: str) -> None:
        # Each watcher stops at its first None and is forgotten: told once, whichever path ends the run.
        for watcher in self._watchers.pop(response_id, ()):
            watcher.put_nowait(None)

    async def listen(self) -> None:
        """Stop a response this process runs when any process cancels it."""
        await self.store.on_cancel(self._cancelled_elsewhere)

    def _cancelled_elsewhere(self, response_id: str) -> None:
        task = self._tasks.get(response_id)
        if task is not None and not task.done():
            task.cancel()

    def _heartbeat(self, response_id: str) -> asyncio.Task[None]:
        current = asyncio.current_task()

        async def beat() -> None:
            while True:
                await asyncio.sleep(self.lease_s / 3)
                try:
                    status = await self.store.heartbeat(response_id)
                except StorageUnavailableError:
                    continue  # the database is away: renewed at the next beat it answers
                if status == "cancelled" and current is not None:
                    current.cancel()  # cancelled by another process
                    return

        return asyncio.get_running_loop().create_task(beat())

    async def cancel(self, response_id: str) -> dict[str, Any]:
        stored = await self.store.get(response_id, "update")
        if not stored.background:
            raise InvalidRequestError(
                "Cannot cancel a synchronous response: it was not created with background=true, so it cannot be cancelled.",
                param="response_id", code="not_cancellable",
            )
        if stored.status in TERMINAL:
            return stored.response
        cancelled = {**stored.response, "status": "cancelled"}
        if await self.store.set_status(response_id, "cancelled", cancelled, only_if_status=["queued", "in_progress"]):
            # The process running it may be another replica: it stops at once (on PostgreSQL),
            # else when it next renews its lease.
            await self.store.announce_cancel(response_id)
        task = self._tasks.get(response_id)
        if task is not None:
            task.cancel()
            await asyncio.wait([task], timeout=5)
        return (await self.store.get(response_id)).response

    async def recover(self, at_start: bool = False) -> None:
        """Resume queued background responses nobody is running; fail those (background or
        streamed) that were being produced when their process died (their lease lapsed, or, at
        start-up, their process on this host is gone)."""
        for stored in await self.store.orphaned(time.time() - self.lease_s, owners_checked=at_start):
            if self.engine.is_producing(stored.id) or self.is_running(stored.id):
                continue
            if stored.status == "queued" and stored.request is not None:
                await self._resume(stored, stored.request)
            else:
                what = "background response was running" if stored.background else "response was being streamed"
                await self._fail_orphan(stored, f"The server stopped while this {what}.")

    async def _resume(self, stored: StoredResponse, request: dict[str, Any]) -> None:
        if request.get(SECRETS_REMOVED):
            await self._fail_orphan(stored, "This background response could not be resumed: the credentials of its tools "
                                            "(authorization, headers) are never stored, and the process that had them stopped.")
            return
        input_items = await self.store.items_of(stored.id, "input")
        try:
            # Its request may no longer pass (a newer rule), its context may be gone (the previous
            # response was deleted), a file it names deleted, its guardrail gone or down: failed,
            # rather than stopping the sweep.
            turn = await self.preparation.resume(CreateResponse.model_validate(request), stored.response, input_items, stored.ancestors)
        except (APIError, ValueError) as error:
            reason = error.message if isinstance(error, APIError) else "its stored request is no longer valid"
            await self._fail_orphan(stored, f"This background response could not be resumed: {reason}")
            return
        log.info("resuming queued background response %s", stored.id)
        self.spawn(turn)

    async def _fail_orphan(self, stored: StoredResponse, message: str) -> None:
        failed = {**stored.response, "status": "failed", "error": {"code": "server_error", "message": message}}
        await self.store.set_status(stored.id, "failed", failed, only_if_status=["queued", "in_progress"])
        log.warning("response %s marked failed: %s", stored.id, message)

    async def stop(self) -> None:
        """Cancel the running responses (each marks itself failed) and wait for them."""
        running = list(self._tasks.values())
        for task in running:
            task.cancel()
        if running:
            await asyncio.wait(running, timeout=10)
