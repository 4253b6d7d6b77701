"""Stacks that talk to a fake upstream live (no recordings): a run.yaml naming it as the inference
provider beside the builtin responses provider and whatever else a test adds, served in server or
library mode and reached through the openai SDK."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import openai

from runtime.testing.targets import open_target

__all__ = ["run_yaml", "served"]


def run_yaml(root: Path, upstream: str, providers: str = "", responses: str = "{}", name: str = "live") -> Path:
    """`root/run.yaml`: the fake upstream at `upstream`, responses (with its `responses` config),
    and `providers` (YAML lines of more APIs under `providers:`, indented two spaces)."""
    path = root / "run.yaml"
    path.write_text(f"""
name: {name}
state_dir: {root / 'state'}
recording: {{mode: live}}
providers:
  inference: [{{provider_id: fake, provider_type: openai, config: {{base_url: "{upstream}", api_key: k}}}}]
  responses: [{{provider_id: builtin, provider_type: builtin, config: {responses}}}]
{providers}""")
    return path


@contextmanager
def served(mode: str, config: Path) -> Iterator[openai.OpenAI]:
    """The stack of `config` as a server process or a library client (`mode`), and a client of it."""
    with open_target(f"{mode}:{config}", env={**os.environ, "STACK_RECORDING_MODE": "live"}) as target:
        client = target.openai(max_retries=0, timeout=30)
        try:
            yield client
        finally:
            client.close()
