"""What a prompts provider implements, and the template rules every provider shares.

A prompt (OGX's shape, which its clients use) is `{prompt_id: "pmpt_<48 hex>", prompt, version,
variables, is_default}`: `prompt` is the template, with `{{name}}` placeholders for its declared
`variables`. Saving a prompt makes a new version (1, 2, ...); one version is the default, which
is what a prompt id without a version means.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from contract.errors import InvalidRequestError

__all__ = ["PLACEHOLDER", "PromptsProvider", "check_template", "placeholders"]

PLACEHOLDER = re.compile(r"{{\s*([A-Za-z_][A-Za-z0-9_]*)\s*}}")
MAX_TEMPLATE = 1_048_576
MAX_VARIABLES = 100


def placeholders(template: str) -> list[str]:
    return list(dict.fromkeys(PLACEHOLDER.findall(template)))


def check_template(body: Mapping[str, Any]) -> tuple[str, list[str]]:
    """`prompt` and `variables` of a create or update body: every placeholder must be declared
    (a variable declared and unused is allowed). A 400 naming the field otherwise."""
    template = body.get("prompt")
    if not isinstance(template, str) or not template.strip():
        raise InvalidRequestError("Missing required parameter: 'prompt' (the template text).", param="prompt",
                                  code="missing_required_parameter" if template is None else "invalid_value")
    if len(template) > MAX_TEMPLATE:
        raise InvalidRequestError(f"Invalid 'prompt': at most {MAX_TEMPLATE} characters.", param="prompt", code="string_above_max_length")
    declared = body.get("variables")
    if declared is None:
        declared = placeholders(template)
    if not isinstance(declared, list) or len(declared) > MAX_VARIABLES or not all(
            isinstance(name, str) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) for name in declared):
        raise InvalidRequestError(f"Invalid 'variables': expected up to {MAX_VARIABLES} names (letters, digits, underscores).",
                                  param="variables", code="invalid_value")
    undeclared = [name for name in placeholders(template) if name not in declared]
    if undeclared:
        raise InvalidRequestError(f"Invalid 'prompt': it uses variables that 'variables' does not declare: {', '.join(undeclared)}.",
                                  param="variables", code="invalid_value")
    return template, list(dict.fromkeys(declared))


@runtime_checkable
class PromptsProvider(Protocol):
    """Prompts and their versions. Unknown ids and versions raise NotFoundError."""

    async def create_prompt(self, template: str, variables: Sequence[str]) -> dict[str, Any]: ...

    async def list_prompts(self) -> list[dict[str, Any]]:
        """The default version of every prompt, newest prompt first."""
        ...

    async def get_prompt(self, prompt_id: str, version: int | None = None) -> dict[str, Any]:
        """A version, or the default one."""
        ...

    async def list_versions(self, prompt_id: str) -> list[dict[str, Any]]: ...

    async def update_prompt(self, prompt_id: str, template: str, variables: Sequence[str], version: int,
                            set_as_default: bool) -> dict[str, Any]:
        """A new version after `version`, which must be the latest (else a 400: someone saved since)."""
        ...

    async def set_default_version(self, prompt_id: str, version: int) -> dict[str, Any]: ...

    async def delete_prompt(self, prompt_id: str) -> None: ...
