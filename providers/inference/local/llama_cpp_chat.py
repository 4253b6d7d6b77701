"""One Chat Completions request in the llama-cpp binding's terms (`ChatPlan`): what this provider
refuses (see llama_cpp_provider's doc), the binding's arguments (the model's chat template, with
tools described in a system message; a grammar for tool calls and `response_format`), and the
generation of its `n` choices on the model's thread. The answer goes back in OpenAI's terms
through llama_cpp_answer."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from contract.errors import InvalidRequestError
from providers.inference.local import tool_calls
from providers.inference.local.json_grammar import OBJECT_GRAMMAR, schema_grammar
from providers.inference.local.llama_cpp_binding import SAMPLING, chat_prompt_tokens, context_checked, grammar

__all__ = ["ChatPlan"]

# OpenAI parameters this provider refuses when set (see llama_cpp_provider's doc), rather than ignore.
_UNSUPPORTED = ("logprobs", "top_logprobs", "audio")


class ChatPlan:
    """One chat request in the binding's terms."""

    def __init__(self, body: Mapping[str, Any], repeat_penalty: float, default_max_tokens: int) -> None:
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
        converted = [converted for message in messages if isinstance(message, Mapping)
                     if (converted := tool_calls.tool_message(message, self.with_tools)) is not None]
        if self.with_tools:
            converted.insert(0, {"role": "system", "content": tool_calls.tools_prompt(tools)})
        kwargs: dict[str, Any] = {"messages": converted, "repeat_penalty": repeat_penalty}
        for name, argument in SAMPLING.items():
            if body.get(name) is not None:
                kwargs[argument] = body[name]
        limit = body.get("max_completion_tokens", body.get("max_tokens"))
        kwargs["max_tokens"] = limit if limit is not None else default_max_tokens
        if self.with_tools:
            calls_grammar = grammar(lambda: tool_calls.grammar(tools, choice), "tools", "Invalid schema for a function in 'tools'",
                                    "invalid_function_parameters")
            if calls_grammar is not None:
                kwargs["grammar"] = calls_grammar
        else:
            response_format = _response_format(body.get("response_format"))
            if response_format is not None and "schema" in response_format:
                # Built here, not by the binding, which falls back to any JSON when it cannot read the schema,
                # and whose JSON lets a string hold raw newlines (providers/inference/local/json_grammar.py).
                schema = response_format["schema"]
                kwargs["grammar"] = grammar(lambda: schema_grammar(schema), "response_format.json_schema.schema",
                                            "Invalid schema for 'response_format'")
            elif response_format is not None:
                kwargs["grammar"] = grammar(lambda: OBJECT_GRAMMAR, "response_format", "response_format")
        self.kwargs = kwargs

    def _kwargs(self, index: int) -> dict[str, Any]:
        """The binding's arguments for choice `index`: with a seed, each choice its own."""
        seed = self.kwargs.get("seed")
        return {**self.kwargs, "seed": seed + index} if index and isinstance(seed, int) else self.kwargs

    def complete(self, model: Any) -> dict[str, Any]:
        """The whole answer, its `n` choices generated one after another (on the model's thread)."""
        with context_checked():
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
            with context_checked():  # the binding checks the prompt's length at the first chunk
                for chunk in model.create_chat_completion(**self._kwargs(index), stream=True):
                    for choice in chunk.get("choices") or ():
                        choice["index"] = index
                    yield chunk
        yield {"prompt_tokens": chat_prompt_tokens(model, self.kwargs["messages"])}


def _refuse_media(messages: list[Any]) -> None:
    """A 400 for an image, audio or file part: a text model would answer as if it had seen it."""
    for number, message in enumerate(messages):
        content = message.get("content") if isinstance(message, Mapping) else None
        for index, part in enumerate(content if isinstance(content, list) else ()):
            kind = part.get("type") if isinstance(part, Mapping) else None
            if kind in ("image_url", "input_audio", "file"):
                raise InvalidRequestError(f"Invalid content type. {kind} is not supported with this model: it reads text only.",
                                          param=f"messages.[{number}].content.[{index}].type", code="unsupported_value")


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
