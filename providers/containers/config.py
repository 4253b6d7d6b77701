"""The built-in containers provider's settings."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["BuiltinContainersConfig"]


class BuiltinContainersConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    default_expiry_minutes: int = Field(default=20, ge=1, description="A container's expiry when its request names none (OpenAI's: 20)")
    max_expiry_minutes: int = Field(default=1440, ge=1, description="The longest `expires_after.minutes` a request may ask for")
    default_memory_limit: Literal["1g", "4g", "16g", "64g"] = Field(default="1g",
                                                                   description="A container's memory when its request names none")
    max_file_bytes: int = Field(default=64 * 1024 * 1024, ge=1,
                                description="The largest file put into a container (an upload, or a copy from the files API)")
    sweep_s: float = Field(default=30.0, gt=0, description="How often containers idle past their expiry are expired")

    @model_validator(mode="after")
    def _default_within_max(self) -> BuiltinContainersConfig:
        if self.default_expiry_minutes > self.max_expiry_minutes:
            raise ValueError(f"default_expiry_minutes ({self.default_expiry_minutes}) is above max_expiry_minutes ({self.max_expiry_minutes})")
        return self
