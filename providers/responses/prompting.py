"""The `prompt` parameter of Responses: a stored prompt template (the prompts API), a version of
it or its default, and values for its `{{variables}}`, expanded into the request.

The template, its text variables substituted, becomes the instructions (before the request's own
`instructions`, if any). Image and file variables (`input_image`, `input_file` values) cannot
stand inside text: their placeholders read "(attached as NAME)" and the parts come as a user
message ahead of the request's input, each after a line naming it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from contract.prompts.protocol import PLACEHOLDER, PromptsProvider
from contract.responses.models import CreateResponse
from contract.errors import InvalidRequestError, NotFoundError

__all__ = ["expand_prompt"]

_MEDIA = ("input_image", "input_file")


async def expand_prompt(request: CreateResponse, prompts: PromptsProvider | None) -> tuple[CreateResponse, dict[str, Any]]:
    """The request with its prompt expanded, and the `prompt` object the response echoes."""
    spec = request.prompt
    if not isinstance(spec, Mapping):
        raise _invalid("Invalid type for 'prompt': expected an object with 'id'.", "prompt", "invalid_type")
    for key in spec:
        if key not in ("id", "version", "variables"):
            raise _invalid(f"Unknown parameter: 'prompt.{key}'.", f"prompt.{key}", "unknown_parameter")
    prompt_id = spec.get("id")
    if not isinstance(prompt_id, str) or not prompt_id:
        raise _invalid("Missing required parameter: 'prompt.id'.", "prompt.id", "missing_required_parameter")
    if prompts is None:
        raise _invalid("Invalid 'prompt': this server keeps no prompts (run.yaml configures no prompts provider).", "prompt.id")
    version = _version(spec.get("version"))
    try:
        stored = await prompts.get_prompt(prompt_id, version)
    except NotFoundError as missing:
        raise NotFoundError(missing.message, param="prompt.version" if missing.param == "version" else "prompt.id",
                            code="not_found") from None
    values = spec.get("variables") or {}
    if not isinstance(values, Mapping):
        raise _invalid("Invalid type for 'prompt.variables': expected an object of names and values.", "prompt.variables", "invalid_type")
    declared = set(stored["variables"])
    for name in values:
        if name not in declared:
            raise _invalid(f"Invalid 'prompt.variables': prompt '{prompt_id}' (version {stored['version']}) has no variable '{name}'.",
                           f"prompt.variables.{name}")
    texts: dict[str, str] = {}
    media: list[dict[str, Any]] = []
    for name, value in values.items():
        where = f"prompt.variables.{name}"
        if isinstance(value, str):
            texts[name] = value
        elif isinstance(value, Mapping) and value.get("type") == "input_text" and isinstance(value.get("text"), str):
            texts[name] = value["text"]
        elif isinstance(value, Mapping) and value.get("type") in _MEDIA:
            texts[name] = f"(attached as {name})"
            media += [{"type": "input_text", "text": f"{name}:"}, dict(value)]
        else:
            raise _invalid(f"Invalid '{where}': expected a string, or an input_text, input_image or input_file part.", where)

    def substitute(match: Any) -> str:
        name = match.group(1)
        if name not in texts:
            raise _invalid(f"Missing required parameter: 'prompt.variables.{name}' (prompt '{prompt_id}' uses it).",
                           f"prompt.variables.{name}", "missing_required_parameter")
        return texts[name]

    text = PLACEHOLDER.sub(substitute, stored["prompt"])
    instructions = f"{text}\n\n{request.instructions}" if request.instructions else text
    update: dict[str, Any] = {"instructions": instructions}
    if media:
        given = [{"role": "user", "content": request.input}] if isinstance(request.input, str) else list(request.input)
        update["input"] = [{"type": "message", "role": "user", "content": media}, *given]
    echo = {"id": prompt_id, "version": str(stored["version"]), "variables": dict(values) or None}
    return request.model_copy(update=update), echo


def _version(value: Any) -> int | None:
    if value is None:
        return None
    text = str(value)
    if isinstance(value, bool) or not text.isdigit() or int(text) < 1:
        raise _invalid("Invalid 'prompt.version': expected a version number such as \"2\".", "prompt.version")
    return int(text)


def _invalid(message: str, param: str, code: str = "invalid_value") -> InvalidRequestError:
    return InvalidRequestError(message, param=param, code=code)
