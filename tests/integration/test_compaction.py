"""Compaction (issue 15, item 3): POST /v1/responses/compact and `context_management` on create,
through the openai SDK in server and library modes, against the fake upstream: the window
returned, the sealed item expanded into the model's context when it comes back, a foreign one
refused, and automatic compaction in a chain."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import openai
import pytest

from fake_upstream.server import FakeUpstream, running_fake_upstream
from support.live_stack import run_yaml, served

HEADER = "A summary of the conversation so far, which replaces its earlier turns:"


@dataclass
class Stack:
    client: openai.OpenAI
    upstream: FakeUpstream

    def chats(self) -> list[dict[str, Any]]:
        return self.upstream.bodies("/v1/chat/completions")


@pytest.fixture(scope="module", params=["server", "library"])
def stack(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_fake_upstream() as upstream:
        with served(request.param, run_yaml(tmp_path_factory.mktemp("compaction"), upstream.base_url, name="compaction")) as client:
            yield Stack(client, upstream)


CONVERSATION: list[Any] = [
    {"role": "user", "content": "My project is called Heron."},
    {"role": "assistant", "content": "Noted: Heron."},
    {"role": "user", "content": "It is written in Rust."},
    {"role": "assistant", "content": "Rust, understood."},
]


def test_compact_returns_the_user_messages_and_one_sealed_compaction_item(stack: Stack) -> None:
    compacted = stack.client.responses.compact(model="fake-model", input=CONVERSATION)
    assert compacted.object == "response.compaction" and compacted.id.startswith("resp_")
    *users, item = compacted.output
    assert [user.content[0].text for user in users] == ["My project is called Heron.", "It is written in Rust."]  # type: ignore[union-attr]
    assert item.type == "compaction" and item.encrypted_content.startswith("v1.") and "Heron" not in item.encrypted_content  # type: ignore[union-attr]
    summary_call = stack.chats()[-1]
    assert "compact" in summary_call["messages"][0]["content"] and "Noted: Heron." in summary_call["messages"][1]["content"]
    assert compacted.usage.input_tokens > 0


def test_a_compacted_window_sent_back_reads_as_the_user_messages_and_the_summary(stack: Stack) -> None:
    compacted = stack.client.responses.compact(model="fake-model", input=CONVERSATION)
    window = [item.model_dump(exclude_none=True, warnings=False) for item in compacted.output]  # user messages typed as output
    response = stack.client.responses.create(model="fake-model", store=False, input=[*window, {"role": "user", "content": "what next?"}])
    assert response.status == "completed"
    messages = stack.chats()[-1]["messages"]
    assert [m["role"] for m in messages] == ["user", "user", "user", "user"]
    summary = messages[0]["content"]
    assert summary.startswith(HEADER) and "Noted: Heron." in summary  # the fake's summary echoes the transcript
    assert messages[3]["content"] == "what next?" and not any(m.get("content") == "Rust, understood." for m in messages)


def test_a_foreign_or_altered_compaction_item_is_a_400_naming_it(stack: Stack) -> None:
    compacted = stack.client.responses.compact(model="fake-model", input=CONVERSATION)
    token = compacted.output[-1].encrypted_content  # type: ignore[union-attr]
    for forged in (token[:-4] + ("AAAA" if not token.endswith("AAAA") else "BBBB"), "v1.bm90IG91cnM=", "plain text"):
        with pytest.raises(openai.BadRequestError) as refused:
            stack.client.responses.create(model="fake-model", input=[
                {"role": "user", "content": "hi"}, {"type": "compaction", "encrypted_content": forged}])
        assert refused.value.body["param"] == "input[1].encrypted_content"  # type: ignore[index]
        assert refused.value.body["code"] == "invalid_encrypted_content"  # type: ignore[index]


def test_a_chain_is_compacted_by_previous_response_id(stack: Stack) -> None:
    first = stack.client.responses.create(model="fake-model", input="Remember the word lighthouse.")
    compacted = stack.client.responses.compact(model="fake-model", previous_response_id=first.id, input="and the number 7")
    *users, item = compacted.output
    assert [user.content[0].text for user in users] == ["Remember the word lighthouse.", "and the number 7"]  # type: ignore[union-attr]
    assert item.type == "compaction"
    with pytest.raises(openai.BadRequestError) as refused:
        stack.client.responses.compact(model="fake-model")
    assert refused.value.body["param"] == "input"  # type: ignore[index]


def test_context_management_compacts_a_long_context_before_the_model_answers(stack: Stack) -> None:
    first = stack.client.responses.create(model="fake-model", input="The launch code is 4471. " * 20)
    events = list(stack.client.responses.create(
        model="fake-model", previous_response_id=first.id, input="What was it?", stream=True,
        context_management=[{"type": "compaction", "compact_threshold": 50}]))  # type: ignore[call-arg]
    kinds = [event.type for event in events]
    assert kinds[2:5] == ["response.output_item.added", "response.compaction.compacting", "response.output_item.done"]
    final = events[-1].response  # type: ignore[union-attr]
    assert final.status == "completed" and [item.type for item in final.output] == ["compaction", "message"]
    answered = stack.chats()[-1]["messages"]  # the model read the compacted window, not the whole chain
    assert [m["role"] for m in answered] == ["user", "user", "user"] and answered[0]["content"].startswith(HEADER)
    assert answered[-1]["content"] == "What was it?"  # the model's last message is still the user's
    assert final.usage.input_tokens > answered.__len__()  # the summary call's tokens are counted too
    third = stack.client.responses.create(model="fake-model", previous_response_id=final.id, input="And now?")
    assert third.status == "completed"
    chained = stack.chats()[-1]["messages"]  # the stored compaction item still stands for what came before it
    assert [m["role"] for m in chained] == ["user", "user", "user", "assistant", "user"]
    assert chained[0]["content"].startswith(HEADER) and chained[-1]["content"] == "And now?"


def test_a_short_context_is_not_compacted(stack: Stack) -> None:
    response = stack.client.responses.create(model="fake-model", input="short",
                                             context_management=[{"type": "compaction", "compact_threshold": 100000}])  # type: ignore[call-arg]
    assert [item.type for item in response.output] == ["message"]


@pytest.mark.parametrize(("entry", "param"), [({"type": "truncate"}, "context_management[0].type"),
                                              ({"type": "compaction", "compact_threshold": 0}, "context_management[0].compact_threshold")])
def test_malformed_context_management_is_a_400(stack: Stack, entry: dict[str, Any], param: str) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        stack.client.responses.create(model="fake-model", input="x", context_management=[entry])  # type: ignore[call-arg]
    assert refused.value.body["param"] == param  # type: ignore[index]
