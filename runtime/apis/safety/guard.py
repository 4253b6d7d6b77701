"""The guardrails' checks, for Responses and chat alike. The input guardrail: a request's new
input checked by the stack's safety provider before any model sees it; flagged input is answered
with the provider's refusal. The output guardrail: a model's text checked before any client sees
it. A provider that cannot answer refuses the request (503) when it fails closed, else lets it pass."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from contract.safety.protocol import SafetyProvider
from contract.errors import APIError, UpstreamError

__all__ = ["flagged_outputs", "guard_input", "input_text"]

log = logging.getLogger("stack")


def input_text(instructions: str | None, items: Sequence[Mapping[str, Any]]) -> str:
    """The text a model would read of the turn's own input: instructions, and the text of messages
    (Responses message items, or chat messages): string contents and parts' `text`."""
    texts = [instructions] if instructions else []
    for item in items:
        if item.get("type", "message") != "message":
            continue
        content = item.get("content")
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, list):
            texts += [str(part.get("text")) for part in content if isinstance(part, Mapping) and isinstance(part.get("text"), str)]
    return "\n\n".join(text for text in texts if text.strip())


async def guard_input(safety: SafetyProvider, instructions: str | None, items: Sequence[Mapping[str, Any]]) -> str | None:
    """The refusal to answer with, when the input is flagged; None when it may go on."""
    text = input_text(instructions, items)
    if not text:
        return None
    try:
        moderation = await safety.moderate([text])
    except APIError as error:
        if safety.guardrails.fail_closed:
            raise UpstreamError("The input could not be checked for safety (the safety provider failed: "
                                f"{error.message}), and this server refuses what it cannot check.", status_code=503,
                                code="guardrail_unavailable") from None
        log.warning("the input guardrail could not check a request and let it pass: %s", error.message)
        return None
    flagged = any(result.get("flagged") for result in moderation.get("results") or ())
    return safety.guardrails.refusal if flagged else None


async def flagged_outputs(safety: SafetyProvider, texts: Sequence[str]) -> list[bool]:
    """Whether the output guardrail flags each of `texts` (one moderation call for all of them)."""
    try:
        moderation = await safety.moderate(list(texts))
    except APIError as error:
        if safety.guardrails.fail_closed:
            raise UpstreamError(f"The answer could not be checked for safety (the safety provider failed: {error.message}), and "
                                "this server does not pass on what it cannot check.", status_code=503,
                                code="guardrail_unavailable") from None
        log.warning("the output guardrail could not check an answer and let it pass: %s", error.message)
        return [False] * len(texts)
    results = list(moderation.get("results") or ())
    if len(results) != len(texts):  # a provider that answers fewer results than inputs: the answer is one verdict
        return [any(bool(result.get("flagged")) for result in results)] * len(texts)
    return [bool(result.get("flagged")) for result in results]
