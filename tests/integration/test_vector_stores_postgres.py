"""Vector stores and file_search with the stack's records in PostgreSQL (the rest of the suite runs
on SQLite): the same scenarios, through PostgreSQL's own full-text index."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

from fake_upstream.server import running_fake_upstream
from runtime.library_client import LibraryClient
from support.postgres import fresh_database
from support.vector_stores import file_search_cites_its_sources, files_that_cannot_be_read_fail_with_a_reason, stores_ingest_and_search

pytestmark = pytest.mark.postgres


@pytest.fixture(scope="module")
def pg_client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[openai.OpenAI]:
    tmp_path = tmp_path_factory.mktemp("pg-vector-stores")
    with fresh_database() as dsn, running_fake_upstream() as upstream:
        config = tmp_path / "run.yaml"
        config.write_text(f"""
name: pg-vector-stores
state_dir: {tmp_path / 'state'}
recording: {{mode: live}}
providers:
  inference: [{{provider_id: fake, provider_type: openai, config: {{base_url: "{upstream.base_url}", api_key: k}}}}]
  responses: [{{provider_id: builtin, provider_type: builtin}}]
  files: [{{provider_id: local, provider_type: local}}]
  vector_stores: [{{provider_id: builtin, provider_type: builtin, config: {{poll_s: 0.2}}}}]
  tool_runtime: [{{provider_id: file_search, provider_type: file_search}}]
storage:
  backends:
    pg: {{type: postgres, dsn: "{dsn}"}}
  stores: {{responses: pg, files: pg, vector_stores: pg}}
""")
        with LibraryClient(config, env={}) as stack:
            yield stack.openai(max_retries=0)


def test_stores_ingest_and_search_on_postgres(pg_client: openai.OpenAI) -> None:
    stores_ingest_and_search(pg_client)


def test_unreadable_files_fail_with_a_reason_on_postgres(pg_client: openai.OpenAI) -> None:
    files_that_cannot_be_read_fail_with_a_reason(pg_client)


def test_file_search_cites_its_sources_on_postgres(pg_client: openai.OpenAI) -> None:
    file_search_cites_its_sources(pg_client, "fake-model")
