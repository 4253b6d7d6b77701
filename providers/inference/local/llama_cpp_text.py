"""One legacy completions request (`/v1/completions`) in the llama-cpp binding's terms
(`TextPlan`): the prompt continued as it is, without the chat template, and its choices generated
on the model's thread."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from typing import Any

from contract.errors import InvalidRequestError
from providers.inference.local.llama_cpp_binding import SAMPLING, context_checked, text_prompt_tokens

__all__ = ["TextPlan"]


class TextPlan:
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
        kwargs: dict[str, Any] = {name: body[argument] for argument, name in SAMPLING.items() if body.get(argument) is not None}
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
        return {"choices": [choice], "usage": {"prompt_tokens": text_prompt_tokens(model, prompt), "completion_tokens": 0}}

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
            with context_checked("prompt"):
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
            with context_checked("prompt"):  # the binding checks the prompt's length at the first chunk
                for chunk in self._create(model, kwargs, True):
                    choices = [{**choice, "index": index} for choice in chunk.get("choices") or ()]
                    completion_tokens += sum(1 for choice in choices if choice.get("text"))
                    yield {"choices": choices}
            if index % self.n == 0:
                prompt_tokens += text_prompt_tokens(model, kwargs["prompt"])
        yield {"usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                         "total_tokens": prompt_tokens + completion_tokens}}
