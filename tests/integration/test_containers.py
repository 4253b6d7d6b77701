"""The Containers API through the openai SDK, in server and library modes: containers made as
bubblewrap sandboxes, files uploaded, copied from the files API and read back, the errors in
OpenAI's shape, and another principal's containers out of reach."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import openai
import pytest

from support.live_stack import run_yaml, served
from support.sandbox import runtime_python

FIVE_MINUTES = {"anchor": "last_active_at", "minutes": 5}


def test_a_container_starts_with_copies_of_files_and_takes_uploads(openai_client: openai.OpenAI) -> None:
    notes = openai_client.files.create(file=("notes.txt", b"remember the milk"), purpose="user_data")
    container = openai_client.containers.create(name="analysis", file_ids=[notes.id], expires_after=FIVE_MINUTES,  # type: ignore[arg-type]
                                                memory_limit="1g", network_policy={"type": "disabled"})
    assert container.id.startswith("cntr_") and container.object == "container" and container.status == "running"
    assert container.expires_after is not None and (container.expires_after.anchor, container.expires_after.minutes) == ("last_active_at", 5)
    assert container.memory_limit == "1g" and container.name == "analysis"
    [copied] = openai_client.containers.files.list(container.id).data
    assert (copied.path, copied.bytes, copied.source, copied.container_id) == ("/mnt/data/notes.txt", 17, "user", container.id)
    uploaded = openai_client.containers.files.create(container.id, file=("data.csv", b"x,y\n1,2\n"))
    assert uploaded.id.startswith("cfile_") and uploaded.object == "container.file" and uploaded.path == "/mnt/data/data.csv"
    content = openai_client.containers.files.content.retrieve(uploaded.id, container_id=container.id)
    assert content.read() == b"x,y\n1,2\n"
    again = openai_client.containers.files.create(container.id, file_id=notes.id)  # the same path: the same file
    assert again.id == copied.id and openai_client.containers.files.retrieve(copied.id, container_id=container.id).bytes == 17
    openai_client.containers.delete(container.id)


def test_lists_page_and_deletes_remove(openai_client: openai.OpenAI) -> None:
    container = openai_client.containers.create(name="pages")
    made = [openai_client.containers.files.create(container.id, file=(f"{i}.txt", b"x" * (i + 1))).id for i in range(3)]
    first = openai_client.containers.files.list(container.id, limit=2, order="asc")
    assert [f.id for f in first.data] == made[:2] and first.has_more
    assert [f.id for f in openai_client.containers.files.list(container.id, limit=2, order="asc")] == made  # the SDK pages on
    openai_client.containers.files.delete(made[0], container_id=container.id)
    with pytest.raises(openai.NotFoundError):
        openai_client.containers.files.retrieve(made[0], container_id=container.id)
    assert container.id in [c.id for c in openai_client.containers.list(name="pages", limit=100)]
    openai_client.containers.delete(container.id)
    with pytest.raises(openai.NotFoundError) as gone:
        openai_client.containers.retrieve(container.id)
    assert gone.value.body["code"] == "not_found" and gone.value.body["param"] == "container_id"  # type: ignore[index]
    assert container.id not in [c.id for c in openai_client.containers.list(name="pages", limit=100)]


def test_an_upload_has_the_providers_size_limit_not_the_servers(openai_client: openai.OpenAI) -> None:
    container = openai_client.containers.create(name="big")
    data = bytes(range(256)) * 1024  # 256 KiB: over run.yaml's server.max_request_bytes (64 KiB)
    made = openai_client.containers.files.create(container.id, file=("big.bin", data))
    assert made.bytes == len(data) and openai_client.containers.files.content.retrieve(made.id, container_id=container.id).read() == data
    with pytest.raises(openai.BadRequestError) as neither:
        openai_client.containers.files.create(container.id)
    assert neither.value.body["code"] == "missing_required_parameter"  # type: ignore[index]
    openai_client.containers.delete(container.id)


@pytest.mark.parametrize(("params", "param", "words"), [
    ({"name": "n", "network_policy": {"type": "allowlist", "allowed_domains": ["pypi.org"]}}, "network_policy.allowed_domains",
     "operator allows no hosts"),
    ({"name": "n", "memory_limit": "64g"}, "memory_limit", "more than this server's sandboxes may have"),
    ({"name": "n", "expires_after": {"anchor": "last_active_at", "minutes": 0}}, "expires_after.minutes", "1 or more"),
    ({"name": "n", "skills": [{"type": "skill_reference", "skill_id": "skill_1"}]}, "skills", "no skills"),
    ({"name": "n", "extra_body": {"image": "python:3.12"}}, "image", "Unrecognized"),
])
def test_what_the_server_cannot_do_is_a_400_naming_the_parameter(openai_client: openai.OpenAI, params: dict[str, object], param: str,
                                                                  words: str) -> None:
    before = len(openai_client.containers.list(limit=100).data)
    with pytest.raises(openai.BadRequestError) as refused:
        openai_client.containers.create(**params)  # type: ignore[arg-type]
    assert refused.value.body["param"] == param and words in refused.value.body["message"]  # type: ignore[index]
    assert refused.value.body["type"] == "invalid_request_error"  # type: ignore[index]
    assert len(openai_client.containers.list(limit=100).data) == before


def test_an_unknown_file_id_is_a_404_naming_it_and_nothing_is_created(openai_client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as missing:
        openai_client.containers.create(name="orphan", file_ids=["file-nope"])
    assert "file-nope" in missing.value.body["message"] and missing.value.body["param"] == "file_ids"  # type: ignore[index]
    assert "orphan" not in [c.name for c in openai_client.containers.list(limit=100)]


@dataclass
class Pair:
    alice: openai.OpenAI
    bob: openai.OpenAI


ALICE, BOB = "sk-alice-0123456789", "sk-bob-0123456789"
PROVIDERS = """  files: [{provider_id: local, provider_type: local}]
  sandboxes: [{provider_id: bubblewrap, provider_type: bubblewrap, config: {python: "%s", allowed_hosts: [pypi.org, "*.pythonhosted.org"]}}]
  containers: [{provider_id: builtin, provider_type: builtin}]
server:
  auth:
    api_keys:
      - {principal: alice, key: "%s"}
      - {principal: bob, key: "%s"}
"""


@pytest.fixture(scope="module", params=["server", "library"])
def pair(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    path = run_yaml(tmp_path_factory.mktemp("containers"), "http://127.0.0.1:9/v1", name="containers",
                    providers=PROVIDERS % (runtime_python(), ALICE, BOB))
    with served(request.param, path) as client:
        yield Pair(client.with_options(api_key=ALICE), client.with_options(api_key=BOB))


def test_another_principals_container_and_files_are_a_404_on_every_route(pair: Pair) -> None:
    mine = pair.alice.containers.create(name="alice's")
    secret = pair.alice.containers.files.create(mine.id, file=("secret.txt", b"alice's"))
    her_file = pair.alice.files.create(file=("a.txt", b"alice's upload"), purpose="user_data")
    calls = [lambda: pair.bob.containers.retrieve(mine.id), lambda: pair.bob.containers.delete(mine.id),
             lambda: pair.bob.containers.files.list(mine.id), lambda: pair.bob.containers.files.retrieve(secret.id, container_id=mine.id),
             lambda: pair.bob.containers.files.content.retrieve(secret.id, container_id=mine.id),
             lambda: pair.bob.containers.files.delete(secret.id, container_id=mine.id),
             lambda: pair.bob.containers.files.create(mine.id, file=("x.txt", b"x")),
             lambda: pair.bob.containers.create(name="bob's", file_ids=[her_file.id])]
    for call in calls:
        with pytest.raises(openai.NotFoundError) as hidden:
            call()
        assert set(hidden.value.body) == {"message", "type", "param", "code"}  # type: ignore[arg-type]
    assert mine.id not in [c.id for c in pair.bob.containers.list(limit=100)]
    assert [c.id for c in pair.alice.containers.list(limit=100)] == [mine.id]
    assert pair.alice.containers.files.content.retrieve(secret.id, container_id=mine.id).read() == b"alice's"


def test_an_allowlist_within_the_operators_hosts_is_kept_and_echoed_and_one_beyond_them_is_a_400(pair: Pair) -> None:
    policy = {"type": "allowlist", "allowed_domains": ["pypi.org", "files.pythonhosted.org"]}
    made = pair.alice.containers.create(name="online", network_policy=policy)  # type: ignore[arg-type]
    assert made.network_policy is not None and made.network_policy.model_dump() == policy
    assert pair.alice.containers.retrieve(made.id).network_policy.model_dump() == policy  # type: ignore[union-attr]
    assert pair.alice.containers.create(name="closed").network_policy.model_dump(exclude_none=True) == {"type": "disabled"}  # type: ignore[union-attr]
    with pytest.raises(openai.BadRequestError) as refused:
        pair.alice.containers.create(name="n", network_policy={"type": "allowlist", "allowed_domains": ["pypi.org", "evil.com"]})
    assert refused.value.body["param"] == "network_policy.allowed_domains"  # type: ignore[index]
    assert "'evil.com' is not among the hosts" in refused.value.body["message"]  # type: ignore[index]
