"""Token usage: as an upstream reports it in a Chat Completions answer (`upstream_usage`), and in
the Responses shape (`usage_from_chat`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["upstream_usage", "usage_from_chat"]


def upstream_usage(value: Any) -> dict[str, Any] | None:
    """An upstream's usage, its token counts kept only where they are integers."""
    if not isinstance(value, Mapping) or not value:
        return None
    usage: dict[str, Any] = {key: count for key, count in value.items()
                             if isinstance(count, int) and not isinstance(count, bool) and not key.endswith("_details")}
    for key in ("prompt_tokens_details", "completion_tokens_details"):
        details = value.get(key)
        if isinstance(details, Mapping):
            usage[key] = {name: count for name, count in details.items() if isinstance(count, int) and not isinstance(count, bool)}
    return usage or None


def usage_from_chat(usage: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """Chat usage (prompt/completion tokens) in the Responses shape (input/output tokens)."""
    if not usage:
        return None
    prompt_details = usage.get("prompt_tokens_details") or {}
    completion_details = usage.get("completion_tokens_details") or {}
    input_tokens = int(usage.get("prompt_tokens") or 0)
    output_tokens = int(usage.get("completion_tokens") or 0)
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": int(prompt_details.get("cached_tokens") or 0),
                                 "cache_write_tokens": int(prompt_details.get("cache_write_tokens") or 0)},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": int(completion_details.get("reasoning_tokens") or 0)},
        "total_tokens": int(usage.get("total_tokens") or input_tokens + output_tokens),
    }
