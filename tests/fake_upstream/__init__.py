"""A fake, deterministic OpenAI-compatible upstream model server for tests and benchmarks.

In tests: `with running_fake_upstream() as upstream: openai.OpenAI(base_url=upstream.base_url, ...)`.
As a process: `python -m fake_upstream --port 8001` (with tests/ on sys.path).
"""

from __future__ import annotations

from fake_upstream.app import (
    CHAT_MODEL,
    CREATED,
    EMBED_MODEL,
    MODEL_IDS,
    REASONER_MODEL,
    RecordedRequest,
    create_app,
)
from fake_upstream.server import FakeUpstream, running_fake_upstream

__all__ = [
    "CHAT_MODEL",
    "CREATED",
    "EMBED_MODEL",
    "MODEL_IDS",
    "REASONER_MODEL",
    "FakeUpstream",
    "RecordedRequest",
    "create_app",
    "running_fake_upstream",
]
