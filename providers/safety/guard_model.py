"""Moderation by a guard model (Llama Guard 3 and its kind) served by any inference provider.

The text is sent as the conversation to judge (the model's own chat template frames it with its
policy); the answer is `safe`, or `unsafe` and a line of hazard codes (S1..S14), which map to
OpenAI's categories.
"""

from __future__ import annotations

import contextlib
import json
import re
import secrets
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, Protocol

from pydantic import Field

from providers.safety import GuardrailsConfig
from contract.spec import Api, ProviderContext, ProviderSpec
from contract.safety.protocol import Guardrails, moderation_result
from contract.errors import UpstreamError

__all__ = ["HAZARDS", "LLAMA_GUARD", "GuardModel", "verdict"]

# Llama Guard 3's hazard taxonomy (MLCommons), in OpenAI's categories.
HAZARDS = {
    "S1": ("violence",), "S2": ("illicit",), "S3": ("sexual", "illicit"), "S4": ("sexual/minors",), "S5": ("harassment",),
    "S6": ("illicit",), "S7": ("illicit",), "S8": ("illicit",), "S9": ("illicit/violent", "violence"), "S10": ("hate",),
    "S11": ("self-harm",), "S12": ("sexual",), "S13": ("illicit",), "S14": ("illicit",),
}


class _Chat(Protocol):
    async def chat_completion(self, body: dict[str, Any], raw: bytes | None = None, *, echo_model: bool = True) -> bytes: ...


class GuardModelConfig(GuardrailsConfig):
    model: str = Field(min_length=1, description="The guard model's id in the inference API (e.g. a Llama Guard 3 model)")


def verdict(answer: str) -> list[str] | None:
    """The OpenAI categories an answer flags ([] for safe), or None when it is not a verdict."""
    lines = [line.strip() for line in answer.strip().splitlines() if line.strip()]
    if not lines:
        return None
    head = lines[0].lower()
    if head == "safe":
        return []
    if head != "unsafe":
        return None
    codes = re.findall(r"S\d{1,2}", " ".join(lines[1:]).upper())
    flagged = [category for code in codes for category in HAZARDS.get(code, ("illicit",))]
    return list(dict.fromkeys(flagged)) or ["illicit"]


class GuardModel:
    """Implements contract.safety.protocol.SafetyProvider."""

    def __init__(self, inference: _Chat, config: GuardModelConfig, provider_id: str) -> None:
        self.inference = inference
        self.config = config
        self.guardrails: Guardrails = config.guardrails(provider_id, config.model)

    async def moderate(self, inputs: Sequence[str | Mapping[str, Any]], model: str | None = None) -> dict[str, Any]:
        model = model or self.config.model
        results = []
        for item in inputs:
            if isinstance(item, Mapping):
                parts = list(item.get("parts") or ())
                text = "\n".join(str(part.get("text", "")) for part in parts if part.get("type") == "text")
                kinds = ["text", *(["image"] if any(part.get("type") == "image_url" for part in parts) else [])]
            else:
                text, kinds = item, ["text"]
            results.append(moderation_result(await self._judge(model, text), input_types=kinds))
        return {"id": f"modr-{secrets.token_hex(12)}", "model": model, "results": results}

    async def _judge(self, model: str, text: str) -> list[str]:
        body = {"model": model, "messages": [{"role": "user", "content": text}], "max_completion_tokens": 20, "temperature": 0}
        answer = json.loads(await self.inference.chat_completion(body, echo_model=False))
        content = str(((answer.get("choices") or [{}])[0].get("message") or {}).get("content") or "")
        flagged = verdict(content)
        if flagged is None:
            raise UpstreamError(f"The guard model '{model}' did not answer with a verdict ('safe' or 'unsafe').", code="upstream_error")
        return flagged


@contextlib.asynccontextmanager
async def create(context: ProviderContext[GuardModelConfig]) -> AsyncIterator[GuardModel]:
    yield GuardModel(context.deps[Api.inference], context.config, context.provider_id)


LLAMA_GUARD = ProviderSpec(
    api=Api.safety,
    name="llama-guard",
    config_model=GuardModelConfig,
    factory=create,
    requires=(Api.inference,),
    description="Moderation by a guard model (Llama Guard 3 and its kind) served by the inference API, and the guardrails that use it",
    sample_config={"model": "llama-guard3:1b"},
)
