"""Running a batch, in the process that holds its lease: validate its file, send each request to
the stack's own endpoint (`contract.loopback`: the same checks, guardrails, tool loop, quotas and
principal as a live request), record each result as it finishes, then write the output and error
files. A process that takes a batch over (its runner died) starts from what is recorded: each
line's result is written once, so the output holds every `custom_id` once.

    validating   the file read line by line; a line's mistake is its error line (failed); no line
                 that can run: the batch fails, its errors naming the lines
    in_progress  the lines not yet recorded, `concurrency` at a time (and at most `max_concurrency`
                 in the process); a 429 or 5xx retried with backoff (its `retry-after` honoured)
                 while the window lasts; what still fails is the line's error line
    cancelling   no new request; those under way finish; then finalized as `cancelled`
    expired      its window over: no new request; finalized as `expired`
    finalizing   the results, in line order, written to the output and error files
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import tempfile
import time
from typing import Any

from contract.caller import CALLER
from contract.files.protocol import FilesProvider
from contract.ids import random_hex
from contract.loopback import Loopback, LoopbackAnswer
from providers.batches.config import BuiltinBatchesConfig
from providers.batches.lines import Checker, Line, read_lines
from providers.batches.store import BatchStore, Result, StoredBatch
from runtime.storage import StorageUnavailableError, when_back

__all__ = ["Runner"]

log = logging.getLogger("stack")

_RETRIED = frozenset({408, 429, 500, 502, 503, 504, 529})
STORE_RETRY_S = 60.0
"""How long a finished request's result waits for a database that cannot serve."""
POLL_S = 0.5
"""How often a running batch renews its lease and looks for a cancel (a cancel stops it within this)."""


class Runner:
    """The batches this process runs."""

    def __init__(self, store: BatchStore, files: FilesProvider, loopback: Loopback, limits: BuiltinBatchesConfig) -> None:
        self.store = store
        self.files = files
        self.loopback = loopback
        self.limits = limits
        self.slots = asyncio.Semaphore(limits.max_concurrency)
        self.tasks: dict[str, asyncio.Task[None]] = {}
        self.in_flight = 0
        """Batch requests under way in this process, all batches together."""
        self._freed = asyncio.Event()
        self._last_start = 0.0

    def start(self, batch_id: str) -> None:
        if batch_id not in self.tasks:
            task = asyncio.create_task(self._run(batch_id), name=f"batch {batch_id}")
            self.tasks[batch_id] = task
            task.add_done_callback(lambda _: self.tasks.pop(batch_id, None))

    async def close(self) -> None:
        for task in list(self.tasks.values()):
            task.cancel()
        await asyncio.gather(*self.tasks.values(), return_exceptions=True)

    async def _run(self, batch_id: str) -> None:
        stored = await self.store.get_any(batch_id)
        if stored is None:
            return
        CALLER.set(stored.principal)  # this task's: the files it reads and writes are its owner's
        state = _State(stored.batch)
        keeper = asyncio.create_task(self._keep_lease(batch_id, state))
        try:
            if stored.status == "validating":
                await self._validate(state)
            unrecorded = False
            for _ in range(3):  # a pass that could not record every line (the database down too long) is followed by another
                unrecorded = state.batch["status"] == "in_progress" and await self._execute(state, stored)
                if not unrecorded:
                    break
            if unrecorded:  # not finalized with lines missing: its lease lapses, and a sweep resumes it
                log.warning("batch %s: paused with results not recorded; a sweep resumes it", batch_id)
            elif state.batch["status"] in ("in_progress", "cancelling", "finalizing"):
                await self._finalize(batch_id, state)
        except StorageUnavailableError as error:  # its lease lapses: a sweep (this process's, or another's) resumes it
            log.warning("batch %s: paused, the database cannot serve: %s", batch_id, error)
        except Exception:  # noqa: BLE001  # a bug: the batch fails with a reason, never stays in progress
            log.exception("batch %s failed", batch_id)
            await self._fail(batch_id, "server_error", "The batch could not be run to its end; see the server's log.")
        finally:
            keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await keeper

    async def _keep_lease(self, batch_id: str, state: _State) -> None:
        while True:
            await asyncio.sleep(POLL_S)
            with contextlib.suppress(Exception):  # a store that does not answer: the next beat tries again
                status = await self.store.heartbeat(batch_id)
                if status == "cancelling":
                    state.cancelled = True

    # --- validating -----------------------------------------------------------------------------

    async def _validate(self, state: _State) -> None:
        batch = state.batch
        checker, total, failed = Checker(batch["endpoint"]), 0, 0
        errors: list[dict[str, Any]] = []
        refused: list[Result] = []
        async for number, raw in read_lines(await self.files.file_content(batch["input_file_id"])):
            total += 1
            if not total % 64:
                await asyncio.sleep(0)  # checking lines is CPU: live requests are answered in between
            if total > self.limits.max_requests:
                await self._fail(batch["id"], "too_many_requests", f"The file has more than {self.limits.max_requests} requests.")
                state.batch["status"] = "failed"
                return
            line = checker.check(number, raw)
            if line.error is None:
                continue
            failed += 1
            if len(errors) < 1000:  # the object names the first thousand; the error file has them all
                errors.append(line.error)
            refused.append(_refused_result(line))
            if len(refused) >= 500:
                await self.store.record(batch["id"], refused)
                refused = []
        await self.store.record(batch["id"], refused)
        batch["errors"] = {"object": "list", "data": errors} if errors else None
        batch["request_counts"] = {"total": total, "completed": 0, "failed": failed}
        batch["model"] = checker.model
        if total == 0 or checker.model is None:
            batch["status"], batch["failed_at"] = "failed", int(time.time())
            if total == 0:
                batch["errors"] = {"object": "list", "data": [{"code": "empty_file", "message": "The input file has no requests.",
                                                             "param": "input_file_id", "line": None}]}
        else:
            batch["status"], batch["in_progress_at"] = "in_progress", int(time.time())
        if not await self.store.save(batch, only_if_status="validating"):  # cancelled meanwhile
            stored = await self.store.get_any(batch["id"])
            if stored is not None:
                state.batch = stored.batch

    # --- in progress ----------------------------------------------------------------------------

    async def _execute(self, state: _State, stored: StoredBatch) -> bool:
        """Send the lines not recorded yet; whether some could not be recorded (another pass is due)."""
        batch = state.batch
        done = await self.store.done_lines(batch["id"])
        checker = Checker(batch["endpoint"])
        gate = asyncio.Semaphore(self.limits.concurrency)
        running: set[asyncio.Task[None]] = set()
        async for number, raw in read_lines(await self.files.file_content(batch["input_file_id"])):
            line = checker.check(number, raw)  # every line, so duplicates are told as the first pass told them
            if number in done or line.error is not None:
                if not number % 64:
                    await asyncio.sleep(0)
                continue
            await gate.acquire()
            await self.slots.acquire()
            await self._give_way()
            if state.stopping():
                gate.release()
                self.slots.release()
                break
            task = asyncio.create_task(self._one(stored, line, batch))
            running.add(task)
            self.in_flight += 1

            def ended(task: asyncio.Task[None]) -> None:
                running.discard(task)
                gate.release()
                self.slots.release()
                self.in_flight -= 1
                self._freed.set()

            task.add_done_callback(ended)
        outcomes = await asyncio.gather(*running, return_exceptions=True)
        unrecorded = [outcome for outcome in outcomes if isinstance(outcome, BaseException)]
        for outcome in unrecorded[:1]:
            log.warning("batch %s: %d results not recorded (%s); the lines go again", batch["id"], len(unrecorded), outcome)
        return bool(unrecorded) and not state.stopping()

    async def _give_way(self) -> None:
        """While interactive requests are in flight, the batches of this process keep at most
        `beside_live` requests under way, and start one at most every `beside_live_interval_s`:
        a batch of 50,000 lines trickles on behind them (it is never starved) and takes its full
        pace again when they are gone."""
        while self.loopback.live() > 0:
            wait = self._last_start + self.limits.beside_live_interval_s - time.monotonic()
            if self.in_flight < self.limits.beside_live and wait <= 0:
                break
            self._freed.clear()
            with contextlib.suppress(TimeoutError):  # or a live request ends: looked at again soon
                await asyncio.wait_for(self._freed.wait(), max(wait, 0.005))
        self._last_start = time.monotonic()

    async def _one(self, stored: StoredBatch, line: Line, batch: dict[str, Any]) -> None:
        answer = await self._send(stored, line, batch)
        # A database that cannot serve for a while: the result waits for it (a line never recorded
        # would be sent again by the pass that follows, never left out of the output).
        await when_back(lambda: self.store.record(batch["id"], [_result(line, answer)]), within_s=STORE_RETRY_S)

    async def _send(self, stored: StoredBatch, line: Line, batch: dict[str, Any]) -> LoopbackAnswer:
        delay = 1.0
        for attempt in range(self.limits.attempts):
            answer = await self.loopback("POST", batch["endpoint"], line.body, stored.principal)
            left = batch["expires_at"] - time.time()
            if answer.status not in _RETRIED or attempt == self.limits.attempts - 1:
                return answer
            wait = _retry_after(answer) or delay
            if wait >= left:
                return answer
            await asyncio.sleep(wait)
            delay = min(delay * 2, 60.0)
        raise AssertionError("unreachable")

    # --- the end --------------------------------------------------------------------------------

    async def _finalize(self, batch_id: str, state: _State) -> None:
        stored = await self.store.get_any(batch_id)  # a cancel of another process's wrote to it
        assert stored is not None
        batch = stored.batch
        end = "cancelled" if stored.status == "cancelling" or state.cancelled else "expired" if time.time() >= batch["expires_at"] else (
            "completed")
        if stored.status != "finalizing":
            was = stored.status
            batch["status"], batch["finalizing_at"] = "finalizing", batch.get("finalizing_at") or int(time.time())
            await self.store.save(batch, only_if_status=was)
        expires = batch.get("output_expires_after")
        expires_s = int(expires["seconds"]) if isinstance(expires, dict) and isinstance(expires.get("seconds"), int) else None
        batch["output_file_id"] = await self._file(batch_id, True, f"batch_{batch_id}_output.jsonl", expires_s)
        batch["error_file_id"] = await self._file(batch_id, False, f"batch_{batch_id}_error.jsonl", expires_s)
        completed, failed, input_tokens, output_tokens = await self.store.counts(batch_id)
        counts = batch.get("request_counts") or {}
        batch["request_counts"] = {"total": int(counts.get("total") or completed + failed), "completed": completed, "failed": failed}
        batch["usage"] = {"input_tokens": input_tokens, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": output_tokens,
                          "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": input_tokens + output_tokens}
        batch["status"] = end
        batch[f"{end}_at"] = int(time.time())
        await self.store.save(batch, only_if_status="finalizing")

    async def _file(self, batch_id: str, ok: bool, name: str, expires_s: int | None) -> str | None:
        """The output (or error) file of the batch's results, written from the store page by page; None when it has no line."""
        with tempfile.TemporaryFile() as sink:
            after, written = 0, 0
            while page := await self.store.results(batch_id, ok, after):
                sink.write(b"".join(text.encode() + b"\n" for _, text in page))
                after, written = page[-1][0], written + len(page)
            if not written:
                return None
            sink.seek(0)
            created = await self.files.create_file(sink, name, "batch_output", expires_s)
        return str(created["id"])

    async def _fail(self, batch_id: str, code: str, message: str) -> None:
        stored = await self.store.get_any(batch_id)
        if stored is None or stored.status not in ("validating", "in_progress", "finalizing", "cancelling"):
            return
        batch = stored.batch
        errors = (batch.get("errors") or {}).get("data") or []
        batch["errors"] = {"object": "list", "data": [*errors, {"code": code, "message": message, "param": None, "line": None}]}
        batch["status"], batch["failed_at"] = "failed", int(time.time())
        await self.store.save(batch, only_if_status=stored.status)


class _State:
    def __init__(self, batch: dict[str, Any]) -> None:
        self.batch = batch
        self.cancelled = False

    def stopping(self) -> bool:
        return self.cancelled or time.time() >= self.batch["expires_at"]


def _result(line: Line, answer: LoopbackAnswer) -> Result:
    try:
        body: Any = json.loads(answer.body)
    except ValueError:
        body = {"error": {"message": answer.body.decode(errors="replace")[:2000], "type": "server_error", "param": None, "code": None}}
    ok = 200 <= answer.status < 300
    usage: dict[str, Any] = body["usage"] if isinstance(body, dict) and isinstance(body.get("usage"), dict) else {}
    tokens_in = usage.get("prompt_tokens", usage.get("input_tokens", 0))
    tokens_out = usage.get("completion_tokens", usage.get("output_tokens", 0))
    text = json.dumps({"id": f"batch_req_{random_hex(16)}", "custom_id": line.custom_id, "response": {
        "status_code": answer.status, "request_id": answer.headers.get("x-request-id"), "body": body}, "error": None})
    return Result(line.number, ok, text, tokens_in if isinstance(tokens_in, int) else 0, tokens_out if isinstance(tokens_out, int) else 0)


def _refused_result(line: Line) -> Result:
    error = line.error or {}
    text = json.dumps({"id": f"batch_req_{random_hex(16)}", "custom_id": line.custom_id, "response": None,
                       "error": {"code": error.get("code"), "message": error.get("message")}})
    return Result(line.number, False, text)


def _retry_after(answer: LoopbackAnswer) -> float | None:
    try:
        return max(0.0, float(answer.headers["retry-after"])) if "retry-after" in answer.headers else None
    except ValueError:
        return None
