"""API keys kept in the database (issue 12, item 1): `stack keys create|list|revoke` against a
run.yaml with `server.auth.database_keys`, and the server (both modes) admitting and refusing
them, and isolating their principals like any other."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import openai
import pytest

from fake_upstream.server import FakeUpstream
from support.live_stack import run_yaml, served

AUTH = """server:
  auth:
    database_keys: {cache_s: 0}
"""


def stack_keys(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "runtime.cli", "keys", *args, "--config", str(config)],
                          capture_output=True, text=True, timeout=60, env=os.environ.copy())


@pytest.mark.parametrize("mode", ["server", "library"])
def test_keys_made_with_stack_keys_are_admitted_until_revoked(tmp_path: Path, upstream: FakeUpstream, mode: str) -> None:
    config = run_yaml(tmp_path, upstream.base_url, name="keys")
    config.write_text(config.read_text() + AUTH)
    made = stack_keys(config, "create", "--principal", "dave", "--attribute", "team=blue", "--attribute", "roles=ops",
                      "--attribute", "roles=oncall", "--name", "laptop")
    assert made.returncode == 0, made.stderr
    dave = json.loads(made.stdout)
    assert dave["key"].startswith("sk-stack-") and dave["id"].startswith("key_")
    assert dave["attributes"] == {"team": "blue", "roles": ["ops", "oncall"]} and dave["name"] == "laptop"
    erin = json.loads(stack_keys(config, "create", "--principal", "erin").stdout)

    listed = stack_keys(config, "list")
    assert listed.returncode == 0
    records = json.loads(listed.stdout)
    assert [record["id"] for record in records] == [dave["id"], erin["id"]]
    assert dave["key"] not in listed.stdout and "key_sha256" not in listed.stdout  # never the key, nor its hash

    with served(mode, config) as client:
        as_dave, as_erin = client.with_options(api_key=dave["key"]), client.with_options(api_key=erin["key"])
        mine = as_dave.responses.create(model="fake-model", input="[tokens:1] dave's")
        assert mine.status == "completed"
        with pytest.raises(openai.NotFoundError):
            as_erin.responses.retrieve(mine.id)  # a database key's principal is isolated like any
        with pytest.raises(openai.AuthenticationError):
            client.with_options(api_key="sk-stack-not-a-key").models.list()

        revoked = stack_keys(config, "revoke", dave["id"])
        assert revoked.returncode == 0, revoked.stderr
        with pytest.raises(openai.AuthenticationError) as refused:
            as_dave.models.list()  # cache_s: 0, so at once (by default within 5 s)
        assert refused.value.body["code"] == "invalid_api_key"  # type: ignore[index]
        assert as_erin.models.list().data is not None
    again = stack_keys(config, "revoke", dave["id"])
    assert again.returncode == 1 and "already revoked" in again.stderr
    assert json.loads(stack_keys(config, "list").stdout)[0]["revoked_at"] is not None


def test_stack_keys_says_what_is_wrong_with_an_attribute(tmp_path: Path, upstream: FakeUpstream) -> None:
    config = run_yaml(tmp_path, upstream.base_url, name="keys")
    bad = stack_keys(config, "create", "--principal", "dave", "--attribute", "team")
    assert bad.returncode == 2 and "expected NAME=VALUE" in bad.stderr
