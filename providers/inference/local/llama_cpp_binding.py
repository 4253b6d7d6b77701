"""The llama-cpp-python binding as the llama-cpp provider meets it: the binding's names for OpenAI's
sampling parameters, its grammars (json_grammar makes them from a client's JSON Schema), its token
counts for a usage, and its refusal of an over-long prompt answered as OpenAI answers it.

Everything here runs on the model's thread (or builds what is handed to it); the binding's own
modules are imported where used, so a stack without the `local` extra imports this module freely.
"""

from __future__ import annotations

import contextlib
import functools
import re
from collections.abc import Callable, Iterator
from typing import Any

from contract.errors import InvalidRequestError

__all__ = ["SAMPLING", "chat_prompt_tokens", "context_checked", "grammar", "text_prompt_tokens"]

# OpenAI parameters and the binding's names for them.
SAMPLING = {"temperature": "temperature", "top_p": "top_p", "seed": "seed", "stop": "stop",
            "presence_penalty": "presence_penalty", "frequency_penalty": "frequency_penalty", "logit_bias": "logit_bias"}

_OVER_CONTEXT = re.compile(r"Requested tokens \((\d+)\) exceed context window of (\d+)")


@contextlib.contextmanager
def context_checked(param: str = "messages") -> Iterator[None]:
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


def grammar(text: Callable[[], str | None], param: str, what: str, code: str = "invalid_value") -> Any:
    """The binding's grammar from `text()` (GBNF, or None for none), built from a client's JSON
    Schema: a schema the converter cannot read is the client's 400, not a server error."""
    from llama_cpp.llama_grammar import LlamaGrammar

    try:
        gbnf = text()
        return None if gbnf is None else LlamaGrammar.from_string(gbnf, verbose=False)
    except Exception as error:  # the converter's own errors: AssertionError for a $ref, ValueError, KeyError...
        raise InvalidRequestError(f"{what}: this model cannot hold its output to it ({str(error)[:200] or type(error).__name__}).",
                                  param=param, code=code) from None




def chat_prompt_tokens(model: Any, messages: list[dict[str, Any]]) -> int:
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


def text_prompt_tokens(model: Any, prompt: str | list[int]) -> int:
    """A prompt's length in tokens as the binding counts it for a whole answer's usage."""
    if isinstance(prompt, list):
        return len(prompt)
    return len(model.tokenize(prompt.encode(), add_bos=True, special=True))


@functools.cache
def _chat_formatter(template: str, eos_token: str, bos_token: str) -> Any:
    # One formatter per template (and its tokens), made at the first count, not at each.
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    return Jinja2ChatFormatter(template=template, eos_token=eos_token, bos_token=bos_token)
