"""The guardrails of a response, run by the stack's safety provider (runtime.apis.safety.guard):
which of them check a request, the input guardrail's refusal, and the output guardrail screening a
streamed answer in batches.

A streamed answer is checked a batch at a time while it goes on streaming into the translator's
hold; a batch's events are released once its check is back (the client waits for one check, not
for each token), and a flagged answer is blocked: its held text dropped, the answer ended as
`content_filter`, the rest of it not read from the model.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, Literal

from contract.errors import InvalidRequestError, ServiceUnavailableError
from contract.responses.models import CreateResponse
from contract.safety.protocol import SafetyProvider
from providers.responses.failures import upstream_json
from providers.responses.translate import Event, StreamTranslator
from runtime.apis.safety.guard import flagged_outputs, guard_input

__all__ = ["OUTPUT_BATCH_CHARS", "Guardrails"]

OUTPUT_BATCH_CHARS = 400  # text held before the output guardrail checks it: a few sentences, not every token


class Guardrails:
    """The guardrails of the stack's safety provider (none without one)."""

    def __init__(self, safety: SafetyProvider | None) -> None:
        self.safety = safety

    def applies(self, request: CreateResponse, side: Literal["input", "output"]) -> bool:
        """Whether the guardrail of `side` checks this request: run.yaml switches it on for every
        request, or the request names the safety provider's guardrails (OGX's `guardrails`, both
        sides), which must exist."""
        names = request.guardrail_names()
        if names:
            if self.safety is None:
                raise ServiceUnavailableError("This request names guardrails, but this server has no safety provider to run them: add "
                                              "one under providers.safety in run.yaml, or remove 'guardrails' from the request.",
                                              param="guardrails", code="no_active_provider")
            known = self.safety.guardrails.names
            for index, name in enumerate(names):
                if name not in known:
                    raise InvalidRequestError(f"Invalid value for 'guardrails[{index}]': no guardrail is named {name[:80]!r} on this "
                                              f"server. Its safety provider answers to: {', '.join(known) or 'no name'}.",
                                              param=f"guardrails[{index}]", code="invalid_value")
            return True
        return self.safety is not None and bool(getattr(self.safety.guardrails, side))

    async def refusal(self, request: CreateResponse, input_items: Sequence[Mapping[str, Any]]) -> str | None:
        """The input guardrail, when it checks this request: the refusal to answer with when it
        flags the input, else None."""
        if self.safety is not None and self.applies(request, "input"):
            return await guard_input(self.safety, request.instructions, input_items)
        return None

    async def screened(self, translator: StreamTranslator, chunks: AsyncIterator[bytes]) -> AsyncIterator[Event]:
        """The events of a streamed answer, each released once the output guardrail has passed
        it; ends early (closing the model's stream) when it flags the answer."""
        pending: tuple[asyncio.Task[bool], int] | None = None
        try:
            async for chunk in chunks:
                for event in translator.feed(upstream_json(chunk)):  # what is not held (nothing unchecked before it)
                    yield event
                if pending is not None and pending[0].done():
                    for event in self._settle(translator, pending):
                        yield event
                    pending = None
                    if translator.blocked:
                        return  # closes the upstream's stream: the rest of a flagged answer is not read
                if pending is None and len(translator.unchecked) >= OUTPUT_BATCH_CHARS:
                    pending = (asyncio.ensure_future(self._flagged(translator.unchecked)), translator.held)
            if pending is not None:
                await asyncio.wait([pending[0]])
                for event in self._settle(translator, pending):
                    yield event
                pending = None
                if translator.blocked:
                    return
        finally:
            if pending is not None:
                pending[0].cancel()
        for event in await self.check_rest(translator):
            yield event

    async def check_rest(self, translator: StreamTranslator) -> list[Event]:
        """The output guardrail on all that is still held once the answer has ended: released, or
        the answer blocked (held text dropped, the answer ended as content_filter)."""
        if not translator.guard or translator.blocked:
            return []
        if not translator.unchecked.strip():
            return translator.release()
        check = asyncio.ensure_future(self._flagged(translator.unchecked))
        with contextlib.suppress(Exception):  # _settle blocks the answer, then raises it
            await check
        return self._settle(translator, (check, translator.held))

    async def _flagged(self, text: str) -> bool:
        """Whether the output guardrail flags `text` (raises the 503 when the check fails closed)."""
        assert self.safety is not None
        return (await flagged_outputs(self.safety, [text]))[0]

    @staticmethod
    def _settle(translator: StreamTranslator, pending: tuple[asyncio.Task[bool], int]) -> list[Event]:
        """The events a finished check covers: released, or the answer blocked."""
        task, count = pending
        if task.exception() is not None:
            translator.block()
            raise task.exception()  # type: ignore[misc]
        return translator.block() if task.result() else translator.release(count)

