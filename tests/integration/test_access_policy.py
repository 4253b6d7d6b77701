"""Access policies (issue 12, item 2): `server.auth.access_policy` widens per-owner isolation, a
team's objects readable by the team and every object reachable by an admin, through the openai
SDK in server and library modes. Without a grant, other owners' objects stay 404s."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import openai
import pytest

from fake_upstream.server import running_fake_upstream
from support.live_stack import run_yaml, served

KEYS = {"alice": "sk-alice-0123456789", "carol": "sk-carol-0123456789", "bob": "sk-bob-0123456789",
        "root": "sk-root-0123456789", "auditor": "sk-auditor-0123456789"}
AUTH = f"""server:
  auth:
    api_keys:
      - {{principal: alice, key: "{KEYS['alice']}", attributes: {{team: blue}}}}
      - {{principal: carol, key: "{KEYS['carol']}", attributes: {{team: [blue, green]}}}}
      - {{principal: bob, key: "{KEYS['bob']}", attributes: {{team: red}}}}
      - {{principal: root, key: "{KEYS['root']}", attributes: {{roles: [admin]}}}}
      - {{principal: auditor, key: "{KEYS['auditor']}"}}
    access_policy:
      - permit: {{actions: [read]}}
        when: user in owners team
        description: a team reads its members' objects
      - permit: {{actions: [read, update, delete]}}
        when: [user with admin in roles]
      - permit: {{actions: [read], principal: auditor}}
"""
PROVIDERS = """  conversations: [{provider_id: builtin, provider_type: builtin}]
  files: [{provider_id: local, provider_type: local}]
  vector_stores: [{provider_id: builtin, provider_type: builtin, config: {poll_s: 0.1}}]
  prompts: [{provider_id: builtin, provider_type: builtin}]
"""


@dataclass
class Callers:
    alice: openai.OpenAI
    carol: openai.OpenAI
    bob: openai.OpenAI
    root: openai.OpenAI
    auditor: openai.OpenAI


@pytest.fixture(scope="module", params=["server", "library"])
def callers(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callers]:
    with running_fake_upstream() as upstream:
        path = run_yaml(tmp_path_factory.mktemp("access"), upstream.base_url, name="access", providers=PROVIDERS)
        path.write_text(path.read_text() + AUTH)
        with served(request.param, path) as client:
            everyone = Callers(**{name: client.with_options(api_key=key) for name, key in KEYS.items()})
            for caller in (everyone.alice, everyone.carol, everyone.bob):
                caller.models.list()  # each is seen once, so its team is known (as in any deployment that has run a while)
            yield everyone


def test_a_team_reads_its_members_responses_but_cannot_change_them(callers: Callers) -> None:
    mine = callers.alice.responses.create(model="fake-model", input="[tokens:2] team notes")
    assert callers.carol.responses.retrieve(mine.id).output_text == "tok1 tok2"
    assert [item.id for item in callers.carol.responses.input_items.list(mine.id).data]
    assert mine.id in _responses(callers.carol)
    chained = callers.carol.responses.create(model="fake-model", input="[tokens:1] and then", previous_response_id=mine.id)
    assert chained.status == "completed"
    with pytest.raises(openai.NotFoundError):
        callers.carol.responses.delete(mine.id)
    # Another team, no grant: as if absent.
    with pytest.raises(openai.NotFoundError):
        callers.bob.responses.retrieve(mine.id)
    assert mine.id not in _responses(callers.bob)
    # And the grant does not run backwards into a reader's own objects for others to change.
    with pytest.raises(openai.NotFoundError):
        callers.alice.responses.delete(chained.id)
    assert callers.alice.responses.retrieve(chained.id).id == chained.id  # readable: carol is in team blue too


def test_a_team_reads_a_members_conversation_but_cannot_add_to_it(callers: Callers) -> None:
    conversation = callers.alice.conversations.create(items=[{"type": "message", "role": "user", "content": "plan"}])
    assert callers.carol.conversations.retrieve(conversation.id).id == conversation.id
    assert len(callers.carol.conversations.items.list(conversation.id).data) == 1
    with pytest.raises(openai.NotFoundError):
        callers.carol.conversations.items.create(conversation.id, items=[{"type": "message", "role": "user", "content": "mine"}])
    with pytest.raises(openai.NotFoundError):
        callers.carol.conversations.update(conversation.id, metadata={"k": "v"})
    with pytest.raises(openai.NotFoundError):
        callers.carol.responses.create(model="fake-model", input="go on", conversation=conversation.id)
    with pytest.raises(openai.NotFoundError):
        callers.carol.conversations.delete(conversation.id)
    with pytest.raises(openai.NotFoundError):
        callers.bob.conversations.retrieve(conversation.id)
    assert len(callers.alice.conversations.items.list(conversation.id).data) == 1  # nothing was added


def test_a_team_reads_stored_completions_files_stores_and_prompts(callers: Callers) -> None:
    completion = callers.alice.chat.completions.create(model="fake-model", store=True, messages=[{"role": "user", "content": "hi"}])
    assert callers.carol.chat.completions.retrieve(completion.id).id == completion.id
    with pytest.raises(openai.NotFoundError):
        callers.carol.chat.completions.delete(completion.id)
    with pytest.raises(openai.NotFoundError):
        callers.bob.chat.completions.retrieve(completion.id)
    upload = callers.alice.files.create(file=("notes.txt", b"the team's notes"), purpose="assistants")
    assert callers.carol.files.retrieve(upload.id).filename == "notes.txt"
    assert upload.id in [entry.id for entry in callers.carol.files.list().data]
    with pytest.raises(openai.NotFoundError):
        callers.carol.files.delete(upload.id)
    store = callers.alice.vector_stores.create(name="team docs")
    assert callers.carol.vector_stores.retrieve(store.id).name == "team docs"
    with pytest.raises(openai.NotFoundError):
        callers.carol.vector_stores.update(store.id, name="renamed")
    with pytest.raises(openai.NotFoundError):
        callers.bob.vector_stores.retrieve(store.id)
    prompt_id = callers.alice.post("/prompts", body={"prompt": "Hello {{name}}", "variables": ["name"]}, cast_to=dict)["prompt_id"]
    assert callers.carol.get(f"/prompts/{prompt_id}", cast_to=dict)["prompt_id"] == prompt_id
    with pytest.raises(openai.NotFoundError):
        callers.carol.delete(f"/prompts/{prompt_id}", cast_to=dict)
    with pytest.raises(openai.NotFoundError):
        callers.bob.get(f"/prompts/{prompt_id}", cast_to=dict)


def test_an_admin_reaches_every_owners_objects(callers: Callers) -> None:
    theirs = callers.bob.responses.create(model="fake-model", input="[tokens:1] red team")
    conversation = callers.bob.conversations.create()
    assert callers.root.responses.retrieve(theirs.id).id == theirs.id
    assert theirs.id in _responses(callers.root)
    callers.root.conversations.update(conversation.id, metadata={"reviewed": "yes"})
    assert callers.bob.conversations.retrieve(conversation.id).metadata == {"reviewed": "yes"}
    callers.root.responses.delete(theirs.id)
    with pytest.raises(openai.NotFoundError):
        callers.bob.responses.retrieve(theirs.id)
    # The admin's own objects are not thereby anyone else's.
    own = callers.root.responses.create(model="fake-model", input="[tokens:1] admin's")
    with pytest.raises(openai.NotFoundError):
        callers.bob.responses.retrieve(own.id)


def test_a_rule_for_one_principal_grants_only_it(callers: Callers) -> None:
    theirs = callers.bob.responses.create(model="fake-model", input="[tokens:1] audited")
    assert callers.auditor.responses.retrieve(theirs.id).id == theirs.id
    with pytest.raises(openai.NotFoundError):
        callers.auditor.responses.delete(theirs.id)
    with pytest.raises(openai.NotFoundError):
        callers.alice.responses.retrieve(theirs.id)


def _responses(client: openai.OpenAI) -> list[str]:
    # The SDK's list of responses is not public API in every version: the route, read directly.
    return [response["id"] for response in client.get("/responses", cast_to=dict, options={"params": {"limit": 100}})["data"]]


def test_a_file_only_readable_by_a_caller_stays_in_its_stores_when_that_caller_tries_to_delete_it(callers: Callers) -> None:
    upload = callers.alice.files.create(file=("roster.txt", b"The blue team meets at the harbour."), purpose="assistants")
    store = callers.alice.vector_stores.create(name="roster", file_ids=[upload.id])
    with pytest.raises(openai.NotFoundError):
        callers.carol.files.delete(upload.id)  # carol may read alice's file, not delete it
    assert [entry.id for entry in callers.alice.vector_stores.files.list(vector_store_id=store.id)] == [upload.id]
    assert callers.alice.files.delete(upload.id).deleted  # its owner may: then it leaves the store too
    assert [entry.id for entry in callers.alice.vector_stores.files.list(vector_store_id=store.id)] == []
