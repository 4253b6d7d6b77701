"""A safety provider that flags text containing blocked words (as `illicit`), written against the
stack's contract only (contract.safety.protocol).

It appends `started` and `stopped` to `audit_log` (when set), so tests can see its lifecycle hooks.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from contract.spec import Api, ProviderContext, ProviderSpec
from contract.safety.protocol import Guardrails, moderation_result


class KeywordFilterConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    blocked_words: list[str] = Field(min_length=1)
    audit_log: Path | None = None


class KeywordFilter:
    def __init__(self, blocked_words: list[str], provider_id: str) -> None:
        self.blocked_words = [word.lower() for word in blocked_words]
        # No guardrail on every request; a Responses request may ask for both by naming this provider.
        self.guardrails = Guardrails(names=(provider_id,))

    def flagged(self, text: str) -> bool:
        lowered = text.lower()
        return any(word in lowered for word in self.blocked_words)

    async def moderate(self, inputs: Sequence[str | Mapping[str, Any]], model: str | None = None) -> dict[str, Any]:
        texts = [item if isinstance(item, str) else " ".join(str(part.get("text", "")) for part in item.get("parts", ()))
                 for item in inputs]
        return {"id": "modr-keyword-filter", "model": model or "keyword-filter",
                "results": [moderation_result(["illicit"] if self.flagged(text) else []) for text in texts]}


def _audit(config: KeywordFilterConfig, provider_id: str, event: str) -> None:
    if config.audit_log is not None:
        with config.audit_log.open("a") as log:
            log.write(f"{provider_id} {event}\n")


@contextlib.asynccontextmanager
async def create(context: ProviderContext[KeywordFilterConfig]) -> AsyncIterator[KeywordFilter]:
    _audit(context.config, context.provider_id, "started")
    try:
        yield KeywordFilter(context.config.blocked_words, context.provider_id)
    finally:
        _audit(context.config, context.provider_id, "stopped")


SPEC = ProviderSpec(
    api=Api.safety,
    name="keyword-filter",
    config_model=KeywordFilterConfig,
    factory=create,
    description="Flags text that contains any of a list of blocked words",
    sample_config={"blocked_words": ["forbidden"]},
)
