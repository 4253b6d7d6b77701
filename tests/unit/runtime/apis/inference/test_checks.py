"""runtime.apis.inference.checks: the message shapes OpenAI accepts pass (the refused ones are
specified in tests/integration/test_client_mistakes.py, through the SDK)."""

from __future__ import annotations

from typing import Any

import pytest

from runtime.apis.inference.checks import check_message


@pytest.mark.parametrize("message", [
    {"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA"}}]},
    {"role": "user", "content": [{"type": "video_url", "video_url": {"url": "https://x/clip.mp4"}}]},  # vLLM's: a vendor's part passes
    {"role": "assistant", "content": None, "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
    {"role": "assistant", "content": [{"type": "refusal", "refusal": "no"}]},
    {"role": "tool", "tool_call_id": "c", "content": [{"type": "text", "text": "42"}]},
    {"role": "system", "content": [{"type": "text", "text": "be brief"}]},
])
def test_messages_openai_accepts_pass(message: dict[str, Any]) -> None:
    check_message(message, 0)
