"""Moderation by an OpenAI-compatible `/moderations` endpoint (OpenAI's own, or a server that
speaks its API)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import httpx2
from pydantic import Field

from providers.safety import GuardrailsConfig
from contract.spec import Api, ProviderContext, ProviderSpec
from contract.safety.protocol import Guardrails
from contract.errors import APIError, UpstreamError

__all__ = ["OPENAI_MODERATION", "OpenAIModeration"]


class OpenAIModerationConfig(GuardrailsConfig):
    base_url: str = Field(default="https://api.openai.com/v1", min_length=1)
    api_key: str = Field(default="", description="Sent as a bearer token")
    model: str = Field(default="omni-moderation-latest", min_length=1, description="The moderation model when a request names none")
    timeout_s: float = Field(default=10.0, gt=0)


class OpenAIModeration:
    """Implements contract.safety.protocol.SafetyProvider."""

    def __init__(self, client: httpx2.AsyncClient, config: OpenAIModerationConfig, provider_id: str) -> None:
        self.client = client
        self.config = config
        self.guardrails: Guardrails = config.guardrails(provider_id, config.model)

    async def moderate(self, inputs: Sequence[str | Mapping[str, Any]], model: str | None = None) -> dict[str, Any]:
        payload: Any = list(inputs[0]["parts"]) if len(inputs) == 1 and isinstance(inputs[0], Mapping) else list(inputs)
        try:
            response = await self.client.post("/moderations", json={"input": payload, "model": model or self.config.model})
        except httpx2.HTTPError as error:
            raise UpstreamError(f"The moderation service could not be reached ({type(error).__name__}).", status_code=503,
                                code="upstream_unreachable") from None
        if response.status_code >= 400:
            try:
                upstream = response.json().get("error") or {}
            except ValueError:
                upstream = {}
            if 400 <= response.status_code < 500 and response.status_code not in (401, 403, 429):
                raise APIError(str(upstream.get("message") or "The moderation request was refused."), param=upstream.get("param"),
                               code=upstream.get("code") or "invalid_value", status_code=response.status_code)
            raise UpstreamError(f"The moderation service answered {response.status_code}.", code="upstream_error")
        try:
            answer = response.json()
            results = answer["results"]
        except (ValueError, KeyError, TypeError):
            raise UpstreamError("The moderation service's answer is not a moderation.", code="upstream_error") from None
        return {"id": str(answer.get("id") or ""), "model": str(answer.get("model") or model or self.config.model),
                "results": results}


@contextlib.asynccontextmanager
async def create(context: ProviderContext[OpenAIModerationConfig]) -> AsyncIterator[OpenAIModeration]:
    config = context.config
    headers = {"Authorization": f"Bearer {config.api_key}"} if config.api_key else {}
    async with context.http_client(base_url=config.base_url, timeout=config.timeout_s, headers=headers) as client:
        yield OpenAIModeration(client, config, context.provider_id)


OPENAI_MODERATION = ProviderSpec(
    api=Api.safety,
    name="openai",
    config_model=OpenAIModerationConfig,
    factory=create,
    description="Moderation by an OpenAI-compatible /moderations endpoint, and the guardrails that use it",
    sample_config={"api_key": "${env.OPENAI_API_KEY}"},
)
