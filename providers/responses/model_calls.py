"""The model calls of a response's tool loop: one chat completion per model turn, streamed or not,
fed through the turn's translator.

Around the call itself: truncation (`truncation: auto` drops the oldest context items while the
model server says the context is too long), the output guardrail (`Guardrails`, a collaborator
passed in), reasoning summaries (a second model call per reasoning item, when the request asks for
them), and a flagged input's refusal, which stands in for the model's answer. The calls read only
the output, so the upstream's model name need not be swapped back.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from functools import partial
from typing import Any, Protocol

from contract.errors import APIError, InvalidRequestError
from providers.responses.failures import image_error, upstream_json
from providers.responses.guardrails import Guardrails
from providers.responses.loop import Hidden, ModelTurn
from providers.responses.request import chat_request
from providers.responses.summaries import summarize, summary_events
from providers.responses.translate import Event, StreamTranslator
from providers.responses.turn import Turn

__all__ = ["Inference", "ModelCalls", "TRUNCATION_ATTEMPTS"]

log = logging.getLogger("stack")

TRUNCATION_ATTEMPTS = 8

Offered = tuple[list[dict[str, Any]], Any] | None


class Inference(Protocol):
    """What responses need of the inference API (its router)."""

    async def resolve(self, model_id: Any) -> Any: ...

    async def chat_completion(self, body: dict[str, Any], raw: bytes | None = None, *, echo_model: bool = True) -> bytes: ...

    async def stream_chat_completion(
        self, body: dict[str, Any], raw: bytes | None = None, *, echo_model: bool = True
    ) -> AsyncIterator[bytes]: ...


class ModelCalls:
    """Makes the `ModelTurn` of a turn's tool loop."""

    def __init__(self, inference: Inference, guardrails: Guardrails, summary_model: str | None = None) -> None:
        self.inference = inference
        self.guardrails = guardrails
        self.summary_model = summary_model

    def for_turn(self, turn: Turn, stream: bool) -> ModelTurn:
        """One model call of `turn`, streamed or not; no layer between the upstream and the loop
        unless summaries are asked for."""
        if turn.refusal is not None:
            return partial(_refuse, turn.refusal)
        reasoning = turn.request.reasoning or {}
        style = str(reasoning.get("summary") or reasoning.get("generate_summary") or "")
        call = partial(self._streamed if stream else self._whole, turn)
        return partial(self._summarized, turn, call, style) if style else call

    async def _whole(self, turn: Turn, translator: StreamTranslator, offered: Offered, max_tokens: int | None,
                     hidden: Hidden) -> AsyncIterator[Event]:
        chat = partial(self.inference.chat_completion, echo_model=False)
        raw = await self._with_truncation(turn, chat, False, offered, max_tokens, hidden)
        for event in translator.feed_completion(upstream_json(raw)):
            yield event
        for event in await self.guardrails.check_rest(translator):
            yield event

    async def _streamed(self, turn: Turn, translator: StreamTranslator, offered: Offered, max_tokens: int | None,
                        hidden: Hidden) -> AsyncIterator[Event]:
        stream = partial(self.inference.stream_chat_completion, echo_model=False)
        chunks = await self._with_truncation(turn, stream, True, offered, max_tokens, hidden)
        if translator.guard:
            async for event in self.guardrails.screened(translator, chunks):
                yield event
            return
        async for chunk in chunks:
            for event in translator.feed(upstream_json(chunk)):
                yield event

    async def _summarized(self, turn: Turn, call: ModelTurn, style: str, translator: StreamTranslator, offered: Offered,
                          max_tokens: int | None, hidden: Hidden) -> AsyncIterator[Event]:
        async for event in call(translator, offered, max_tokens, hidden):
            if event["type"] == "response.output_item.done" and event["item"]["type"] == "reasoning":
                for summary_event in await self._summary(turn, event["item"], event["output_index"], style, translator):
                    yield summary_event
            yield event

    async def _with_truncation(self, turn: Turn, call: Callable[[dict[str, Any]], Awaitable[Any]], stream: bool,
                               offered: Offered, max_tokens: int | None, hidden: Hidden) -> Any:
        """Call the model; with truncation=auto, drop the oldest history items while the
        upstream says the context is too long."""
        dropped = 0
        for _ in range(TRUNCATION_ATTEMPTS):
            body = chat_request(turn.request, turn.messages(dropped, hidden), stream=stream, offered=offered, max_tokens=max_tokens)
            try:
                return await call(body)
            except APIError as error:
                image = image_error(error, body["messages"])
                if image is not None:
                    raise image from None
                if error.code != "context_length_exceeded" or turn.request.truncation != "auto" or dropped >= turn.droppable:
                    raise
                dropped = min(turn.droppable, dropped + max(1, (turn.droppable - dropped + 3) // 4))
                log.info("response %s: context too long, dropping the %d oldest items", turn.response["id"], dropped)
        raise InvalidRequestError("The input is too long for the model's context, even after truncation.", code="context_length_exceeded")

    async def _summary(self, turn: Turn, item: dict[str, Any], output_index: int, style: str,
                       translator: StreamTranslator) -> list[Event]:
        """Summarize a finished reasoning item into its `summary` (sealed again if it is sealed);
        the summary's events, to come before the item's `output_item.done`."""
        text = "".join(str(part.get("text", "")) for part in item.get("content") or () if isinstance(part, Mapping))
        model = self.summary_model or str(turn.request.model)
        summary = await summarize(self.inference, model, text, style) if text.strip() else None
        if summary is None:
            return []
        item["summary"] = [{"type": "summary_text", "text": summary}]
        if translator.seal is not None:
            item["encrypted_content"] = translator.seal(item)
        return summary_events(item, output_index, summary)


async def _refuse(refusal: str, translator: StreamTranslator, offered: Offered, max_tokens: int | None,
                  hidden: Hidden) -> AsyncIterator[Event]:
    """The input guardrail's refusal in place of the model's answer, through the same events a
    model's refusal makes."""
    for event in translator.feed({"choices": [{"index": 0, "delta": {"role": "assistant", "refusal": refusal}, "finish_reason": "stop"}]}):
        yield event
