"""Concurrent responses on one conversation with the stack's records in PostgreSQL
(the rest of the suite runs on SQLite): every response appends its whole block, none interleave."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fake_upstream.server import FakeUpstream, running_fake_upstream
from runtime.library_client import LibraryClient
from support.postgres import fresh_database
from support.scenarios import concurrent_turns_keep_their_blocks

pytestmark = pytest.mark.postgres


@pytest.fixture
def pg_stack(tmp_path: Path) -> Iterator[LibraryClient]:
    with fresh_database() as dsn, running_fake_upstream() as upstream:
        config = tmp_path / "run.yaml"
        config.write_text(_config(upstream, dsn, tmp_path))
        with LibraryClient(config, env={}) as stack:
            yield stack


def _config(upstream: FakeUpstream, dsn: str, tmp_path: Path) -> str:
    return f"""
name: pg
state_dir: {tmp_path / 'state'}
recording: {{mode: live}}
providers:
  inference: [{{provider_id: fake, provider_type: openai, config: {{base_url: "{upstream.base_url}", api_key: k}}}}]
  responses: [{{provider_id: builtin, provider_type: builtin}}]
  conversations: [{{provider_id: builtin, provider_type: builtin}}]
storage:
  backends:
    pg: {{type: postgres, dsn: "{dsn}", pool_size: 20}}
  stores: {{responses: pg, conversations: pg}}
"""


def test_concurrent_responses_on_postgres_keep_their_blocks(pg_stack: LibraryClient) -> None:
    concurrent_turns_keep_their_blocks(pg_stack.async_openai(max_retries=0), turns=12)
