"""Inference providers for OpenAI-compatible servers: OpenAI itself, vLLM and Ollama.

They share one adapter (`openai_compat`) and differ in their defaults."""

from __future__ import annotations

from pydantic import Field, SecretStr

from providers.inference.openai_compat import OpenAICompatConfig, open_adapter
from contract.spec import Api, ProviderSpec

__all__ = ["OLLAMA", "OPENAI", "VLLM"]


class OpenAIConfig(OpenAICompatConfig):
    base_url: str = Field(default="https://api.openai.com/v1", min_length=1)
    api_key: SecretStr | None = Field(description="The API key, sent as a bearer token")


class VllmConfig(OpenAICompatConfig):
    base_url: str = Field(default="http://localhost:8000/v1", min_length=1)


class OllamaConfig(OpenAICompatConfig):
    base_url: str = Field(default="http://localhost:11434/v1", min_length=1)


OPENAI = ProviderSpec(
    api=Api.inference,
    name="openai",
    config_model=OpenAIConfig,
    factory=open_adapter,
    description="Any OpenAI-compatible server: OpenAI, vLLM, llama.cpp server, LM Studio... (base_url, api_key)",
    sample_config={"base_url": "${env.OPENAI_BASE_URL:=https://api.openai.com/v1}", "api_key": "${env.OPENAI_API_KEY:=}"},
)

VLLM = ProviderSpec(
    api=Api.inference,
    name="vllm",
    config_model=VllmConfig,
    factory=open_adapter,
    description="A vLLM server's OpenAI-compatible endpoint (reasoning_content passed through)",
    sample_config={"base_url": "${env.VLLM_URL:=http://localhost:8000/v1}", "api_key": "${env.VLLM_API_KEY:=}"},
)

OLLAMA = ProviderSpec(
    api=Api.inference,
    name="ollama",
    config_model=OllamaConfig,
    factory=open_adapter,
    description="An Ollama server's OpenAI-compatible endpoint",
    sample_config={"base_url": "${env.OLLAMA_URL:=http://localhost:11434/v1}"},
)
