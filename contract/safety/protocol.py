"""What a safety provider implements: moderation of text (and image) inputs in OpenAI's shape,
and the guardrails run.yaml switches on with it.

`moderation_result` builds one result with every category OpenAI lists (a provider that knows
fewer leaves the rest false, scored 0)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

__all__ = ["CATEGORIES", "Guardrails", "SafetyProvider", "moderation_result"]

CATEGORIES = ("harassment", "harassment/threatening", "hate", "hate/threatening", "illicit", "illicit/violent", "self-harm",
              "self-harm/instructions", "self-harm/intent", "sexual", "sexual/minors", "violence", "violence/graphic")
_IMAGE_CATEGORIES = frozenset({"self-harm", "self-harm/instructions", "self-harm/intent", "sexual", "violence", "violence/graphic"})


@dataclass(frozen=True)
class Guardrails:
    """Which traffic the stack checks with its safety provider."""

    input: bool = False
    """Check what clients send (Responses input, chat messages) before any model sees it."""
    output: bool = False
    """Check what models answer before any client sees it."""
    fail_closed: bool = True
    """When the provider cannot answer: refuse the request (503) rather than let it pass unchecked."""
    refusal: str = "I can't help with that."
    names: tuple[str, ...] = ()
    """What a Responses request's `guardrails` may name to have both checks run on it, whatever
    `input` and `output` say (the stack's provider id, by convention, and its moderation model)."""


def moderation_result(flagged: Iterable[str], scores: Mapping[str, float] | None = None,
                      input_types: Sequence[str] = ("text",)) -> dict[str, Any]:
    """One `results[]` entry: `flagged` categories true, scores as given (1.0 for flagged ones without a score)."""
    hits = set(flagged)
    given = dict(scores or {})
    return {
        "flagged": bool(hits),
        "categories": {name: name in hits for name in CATEGORIES},
        "category_scores": {name: float(given.get(name, 1.0 if name in hits else 0.0)) for name in CATEGORIES},
        "category_applied_input_types": {name: [kind for kind in input_types if kind == "text" or name in _IMAGE_CATEGORIES]
                                         for name in CATEGORIES},
    }


@runtime_checkable
class SafetyProvider(Protocol):
    guardrails: Guardrails

    async def moderate(self, inputs: Sequence[str | Mapping[str, Any]], model: str | None = None) -> dict[str, Any]:
        """A ModerationCreateResponse (`id`, `model`, `results`, one per input; a list of parts is
        one input). Raises APIError when the moderation cannot be made (an upstream down: 502/503)."""
        ...
