"""Per-owner isolation (issue 12, item 2) with auth on, through the openai SDK in server and
library modes: two principals, and each route tried on the other's objects, which are a 404 as if
they did not exist; lists show only the caller's own."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import openai
import pytest

from fake_upstream.server import running_fake_upstream
from support.live_stack import run_yaml, served

ALICE, BOB = "sk-alice-0123456789", "sk-bob-0123456789"
AUTH = f"""server:
  auth:
    api_keys:
      - {{principal: alice, key: "{ALICE}"}}
      - {{principal: bob, key: "{BOB}"}}
"""


PROVIDERS = """  conversations: [{provider_id: builtin, provider_type: builtin}]
  files: [{provider_id: local, provider_type: local}]
  vector_stores: [{provider_id: builtin, provider_type: builtin, config: {poll_s: 0.1}}]
  prompts: [{provider_id: builtin, provider_type: builtin}]
"""


@dataclass
class Pair:
    alice: openai.OpenAI
    bob: openai.OpenAI


@pytest.fixture(scope="module", params=["server", "library"])
def pair(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    with running_fake_upstream() as upstream:
        path = run_yaml(tmp_path_factory.mktemp("isolation"), upstream.base_url, name="isolation",
                        providers=PROVIDERS)
        path.write_text(path.read_text() + AUTH)
        with served(request.param, path) as client:
            yield Pair(client.with_options(api_key=ALICE), client.with_options(api_key=BOB))


def test_a_response_of_another_owner_is_a_404_on_every_route(pair: Pair) -> None:
    mine = pair.alice.responses.create(model="fake-model", input="[tokens:1] alice's secret")
    with pytest.raises(openai.NotFoundError):
        pair.bob.responses.retrieve(mine.id)
    with pytest.raises(openai.NotFoundError):
        pair.bob.responses.input_items.list(mine.id)
    with pytest.raises(openai.NotFoundError):
        pair.bob.responses.delete(mine.id)
    with pytest.raises(openai.BadRequestError) as chained:  # as for a response that is not there at all
        pair.bob.responses.create(model="fake-model", input="go on", previous_response_id=mine.id)
    assert chained.value.body["code"] == "previous_response_not_found"  # type: ignore[index]
    item_id = pair.alice.responses.input_items.list(mine.id).data[0].id
    with pytest.raises(openai.APIStatusError) as referenced:
        pair.bob.responses.create(model="fake-model", input=[{"type": "item_reference", "id": item_id}])
    assert referenced.value.status_code in (400, 404)
    assert pair.alice.responses.retrieve(mine.id).output_text == "tok1"  # still there for its owner
    assert pair.alice.responses.create(model="fake-model", input=[{"type": "item_reference", "id": item_id}]).status == "completed"


def test_a_background_response_of_another_owner_cannot_be_cancelled_or_followed(pair: Pair) -> None:
    mine = pair.alice.responses.create(model="fake-model", input="[slow:20] [tokens:30] long", background=True)
    with pytest.raises(openai.NotFoundError):
        pair.bob.responses.cancel(mine.id)
    with pytest.raises(openai.NotFoundError):
        list(pair.bob.responses.retrieve(mine.id, stream=True, starting_after=0))
    deadline = time.monotonic() + 10
    while pair.alice.responses.retrieve(mine.id).status in ("queued", "in_progress") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pair.alice.responses.retrieve(mine.id).status == "completed"  # bob's cancel did not reach it


def test_lists_show_only_the_callers_responses(pair: Pair) -> None:
    alices = {pair.alice.responses.create(model="fake-model", input="[tokens:1] a").id for _ in range(2)}
    bobs = {pair.bob.responses.create(model="fake-model", input="[tokens:1] b").id}
    # The SDK's list of responses is not public API in every version: the route, read directly.
    seen_by_alice = {r["id"] for r in pair.alice.get("/responses", cast_to=dict, options={"params": {"limit": 100}})["data"]}
    seen_by_bob = {r["id"] for r in pair.bob.get("/responses", cast_to=dict, options={"params": {"limit": 100}})["data"]}
    assert alices <= seen_by_alice and not bobs & seen_by_alice
    assert bobs <= seen_by_bob and not alices & seen_by_bob


def test_a_conversation_of_another_owner_is_a_404_on_every_route(pair: Pair) -> None:
    mine = pair.alice.conversations.create(items=[{"type": "message", "role": "user", "content": "alice's plan"}])
    item_id = pair.alice.conversations.items.list(mine.id).data[0].id
    for attempt in (lambda: pair.bob.conversations.retrieve(mine.id),
                    lambda: pair.bob.conversations.update(mine.id, metadata={"k": "v"}),
                    lambda: pair.bob.conversations.items.list(mine.id),
                    lambda: pair.bob.conversations.items.retrieve(item_id, conversation_id=mine.id),
                    lambda: pair.bob.conversations.items.create(mine.id, items=[{"type": "message", "role": "user", "content": "x"}]),
                    lambda: pair.bob.conversations.items.delete(item_id, conversation_id=mine.id),
                    lambda: pair.bob.conversations.delete(mine.id)):
        with pytest.raises(openai.NotFoundError):
            attempt()
    with pytest.raises(openai.NotFoundError):
        pair.bob.responses.create(model="fake-model", input="[tokens:1] read it", conversation=mine.id)
    answered = pair.alice.responses.create(model="fake-model", input="[tokens:1] go on", conversation=mine.id)
    assert answered.status == "completed"
    assert len(pair.alice.conversations.items.list(mine.id).data) == 3  # bob's attempts left nothing behind


def test_a_stored_chat_completion_of_another_owner_is_a_404_and_absent_from_lists(pair: Pair) -> None:
    mine = pair.alice.chat.completions.create(model="fake-model", store=True, messages=[{"role": "user", "content": "[tokens:1] hi"}])
    for attempt in (lambda: pair.bob.chat.completions.retrieve(mine.id),
                    lambda: pair.bob.chat.completions.messages.list(mine.id),
                    lambda: pair.bob.chat.completions.update(mine.id, metadata={"k": "v"}),
                    lambda: pair.bob.chat.completions.delete(mine.id)):
        with pytest.raises(openai.NotFoundError):
            attempt()
    assert mine.id in {c.id for c in pair.alice.chat.completions.list(limit=100).data}
    assert mine.id not in {c.id for c in pair.bob.chat.completions.list(limit=100).data}
    assert pair.alice.chat.completions.retrieve(mine.id).id == mine.id


def test_files_vector_stores_and_prompts_of_another_owner_are_404s_and_absent_from_lists(pair: Pair) -> None:
    uploaded = pair.alice.files.create(file=("notes.txt", b"The heron nests by the river."), purpose="assistants")
    store = pair.alice.vector_stores.create(name="alice's", file_ids=[uploaded.id])
    prompt = pair.alice.post("/prompts", body={"prompt": "Hello {{name}}", "variables": ["name"]}, cast_to=dict)
    for attempt in (lambda: pair.bob.files.retrieve(uploaded.id),
                    lambda: pair.bob.files.content(uploaded.id),
                    lambda: pair.bob.files.delete(uploaded.id),
                    lambda: pair.bob.vector_stores.retrieve(store.id),
                    lambda: pair.bob.vector_stores.update(store.id, name="mine now"),
                    lambda: pair.bob.vector_stores.files.list(store.id),
                    lambda: pair.bob.vector_stores.files.retrieve(uploaded.id, vector_store_id=store.id),
                    lambda: pair.bob.vector_stores.search(store.id, query="heron"),
                    lambda: pair.bob.vector_stores.delete(store.id),
                    lambda: pair.bob.get(f"/prompts/{prompt['prompt_id']}", cast_to=dict),
                    lambda: pair.bob.delete(f"/prompts/{prompt['prompt_id']}", cast_to=dict)):
        with pytest.raises(openai.NotFoundError):
            attempt()
    with pytest.raises(openai.NotFoundError):  # bob cannot put alice's file into a store of his
        pair.bob.vector_stores.create(name="bob's", file_ids=[uploaded.id])
    with pytest.raises(openai.APIStatusError) as searched:  # nor search her store from a response
        pair.bob.responses.create(model="fake-model", input="find it",
                                  tools=[{"type": "file_search", "vector_store_ids": [store.id]}])
    assert searched.value.status_code in (400, 404)
    assert uploaded.id in {f.id for f in pair.alice.files.list().data} and uploaded.id not in {f.id for f in pair.bob.files.list().data}
    assert store.id in {v.id for v in pair.alice.vector_stores.list().data}
    assert store.id not in {v.id for v in pair.bob.vector_stores.list().data}
    assert prompt["prompt_id"] not in {p["prompt_id"] for p in pair.bob.get("/prompts", cast_to=dict)["data"]}
    assert pair.alice.get(f"/prompts/{prompt['prompt_id']}", cast_to=dict)["prompt"] == "Hello {{name}}"
    assert pair.alice.vector_stores.retrieve(store.id).name == "alice's"
