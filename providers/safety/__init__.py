"""Safety providers: moderation by an OpenAI-compatible moderations endpoint (`openai`), or by a
guard model such as Llama Guard served by any inference provider (`llama-guard`)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from contract.safety.protocol import Guardrails

__all__ = ["GuardrailsConfig"]


class GuardrailsConfig(BaseModel):
    """The guardrails a safety provider runs, shared by every safety provider's config."""

    model_config = ConfigDict(extra="forbid")

    check_input: bool = Field(default=False, description="Check Responses input and chat messages before any model sees them")
    check_output: bool = Field(default=False, description=(
        "Check Responses output (text and reasoning, in batches of about 400 characters) before any client sees it"))
    fail_closed: bool = Field(default=True, description="When moderation cannot be made, refuse the request (503) rather than pass it")
    refusal: str = Field(default="I can't help with that.", min_length=1, description="What a refused request is answered")

    def guardrails(self, *names: str) -> Guardrails:
        """The guardrails of this config; `names`: what requests may name to ask for them."""
        return Guardrails(input=self.check_input, output=self.check_output, fail_closed=self.fail_closed, refusal=self.refusal,
                          names=tuple(dict.fromkeys(names)))
