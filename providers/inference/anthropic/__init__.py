"""The `anthropic` inference provider: Claude models, or any server of Anthropic's Messages API,
served as chat completions (and so to Responses, its server-side tools and Conversations, which are
built on chat). docs/inference.md has what is translated and what is lost."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from contract.spec import Api, ProviderContext, ProviderSpec
from providers.inference.anthropic.config import AnthropicConfig
from providers.inference.anthropic.provider import AnthropicProvider

__all__ = ["ANTHROPIC", "AnthropicConfig", "AnthropicProvider", "open_anthropic"]


@contextlib.asynccontextmanager
async def open_anthropic(context: ProviderContext[AnthropicConfig]) -> AsyncIterator[AnthropicProvider]:
    config = context.config
    transport = context.http_transport(max_connections=config.max_connections, connect_timeout=config.connect_timeout_s)
    try:
        yield AnthropicProvider(context.provider_id, transport, config)
    finally:
        await transport.aclose()


ANTHROPIC = ProviderSpec(
    api=Api.inference,
    name="anthropic",
    config_model=AnthropicConfig,
    factory=open_anthropic,
    description="Claude models through Anthropic's Messages API (or any server of it, by base_url), as chat completions",
    sample_config={"base_url": "${env.ANTHROPIC_BASE_URL:=https://api.anthropic.com}", "api_key": "${env.ANTHROPIC_API_KEY:=}"},
)
