"""Safety: POST /v1/moderations through the openai SDK, by an OpenAI-compatible moderations
endpoint (the fake upstream's) and by a guard model (Llama Guard's verdicts, from the fake
upstream's chat); and the input guardrail of Responses, in server and library modes."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import openai
import pytest

from fake_upstream.server import FakeUpstream, running_fake_upstream
from runtime.library_client import LibraryClient
from support.live_stack import run_yaml, served


@dataclass
class Stack:
    client: openai.OpenAI
    upstream: FakeUpstream

    def chat_calls(self) -> int:
        return len(self.upstream.bodies("/v1/chat/completions"))


def config(root: Path, upstream: str, safety: str) -> Path:
    return run_yaml(root, upstream, f"  safety: [{safety}]", name="safety")


@contextmanager
def moderated(mode: str, root: Path, **guardrails: bool) -> Iterator[Stack]:
    """A stack whose safety provider is the fake upstream's /v1/moderations, with these guardrails on."""
    with running_fake_upstream() as upstream:
        switches = "".join(f", {name}: {str(value).lower()}" for name, value in guardrails.items())
        safety = f'{{provider_id: moderation, provider_type: openai, config: {{base_url: "{upstream.base_url}"{switches}}}}}'
        with served(mode, config(root, upstream.base_url, safety)) as client:
            yield Stack(client, upstream)


@pytest.fixture(scope="module", params=["server", "library"])
def stack(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with moderated(request.param, tmp_path_factory.mktemp("safety"), check_input=True) as stack:
        yield stack


def test_moderations_classify_each_input_in_openais_shape(stack: Stack) -> None:
    result = stack.client.moderations.create(input=["a calm day at sea", "[flag:violence] [flag:hate] a threat"])
    calm, threat = result.results
    assert not calm.flagged and threat.flagged
    assert threat.categories.violence and threat.categories.hate and not threat.categories.self_harm
    assert threat.category_scores.violence > 0.9 and result.model == "omni-moderation-latest"
    parts = stack.client.moderations.create(model="omni-moderation-latest", input=[
        {"type": "text", "text": "[flag:self-harm] text"}, {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}])
    assert len(parts.results) == 1 and parts.results[0].categories.self_harm


@pytest.mark.parametrize(("body", "param"), [({}, "input"), ({"input": [1, 2]}, "input[0]"), ({"input": "x", "user": "u"}, "user")])
def test_a_malformed_moderation_request_is_a_400_naming_the_field(stack: Stack, body: dict[str, object], param: str) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        stack.client.post("/moderations", body=body, cast_to=object)
    assert refused.value.body["param"] == param  # type: ignore[index]


def test_flagged_input_is_refused_and_no_model_sees_it(stack: Stack) -> None:
    before = stack.chat_calls()
    response = stack.client.responses.create(model="fake-model", input="[flag:violence] tell me how to hurt them")
    (message,) = response.output
    assert response.status == "completed" and message.type == "message"
    assert [(part.type, getattr(part, "refusal", None)) for part in message.content] == [("refusal", "I can't help with that.")]
    assert stack.chat_calls() == before
    events = list(stack.client.responses.create(model="fake-model", input="[flag:hate] hateful words", stream=True))
    kinds = [event.type for event in events]
    assert "response.refusal.delta" in kinds and "response.refusal.done" in kinds and kinds[-1] == "response.completed"
    assert "response.output_text.delta" not in kinds and stack.chat_calls() == before


def test_clean_input_goes_to_the_model(stack: Stack) -> None:
    before = stack.chat_calls()
    response = stack.client.responses.create(model="fake-model", input="[tokens:2] a calm question")
    assert response.output_text == "tok1 tok2" and stack.chat_calls() == before + 1
    moderated = stack.upstream.bodies("/v1/moderations")[-1]
    assert moderated["input"] == ["[tokens:2] a calm question"]


def test_a_guard_that_fails_refuses_the_request_when_it_fails_closed(stack: Stack) -> None:
    with pytest.raises(openai.APIStatusError) as refused:
        stack.client.responses.create(model="fake-model", input="[moderation-error:500] anything")
    assert refused.value.status_code == 503 and refused.value.body["code"] == "guardrail_unavailable"  # type: ignore[index]


def test_a_guard_that_fails_open_lets_the_request_pass(tmp_path: Path) -> None:
    with moderated("library", tmp_path, check_input=True, fail_closed=False) as stack:
        response = stack.client.responses.create(model="fake-model", input="[moderation-error:500] [tokens:1] hi")
    assert response.output_text == "tok1"


def test_a_guard_model_judges_with_llama_guards_verdicts(tmp_path: Path) -> None:
    with running_fake_upstream() as upstream:
        safety = "{provider_id: guard, provider_type: llama-guard, config: {model: fake-model}}"
        with LibraryClient(config(tmp_path, upstream.base_url, safety), env={}) as library:
            client = library.openai(max_retries=0)
            unsafe = client.moderations.create(input=f'[answer {json.dumps({"text": "unsafe" + chr(10) + "S10,S1"})}] some text')
            assert unsafe.results[0].flagged and unsafe.results[0].categories.hate and unsafe.results[0].categories.violence
            assert unsafe.model == "fake-model"
            safe = client.moderations.create(input=f'[answer {json.dumps({"text": "safe"})}] hello')
            assert not safe.results[0].flagged
            with pytest.raises(openai.APIStatusError) as confused:
                client.moderations.create(input=f'[answer {json.dumps({"text": "I think it is fine"})}] hello')
            assert confused.value.status_code == 502
    judged = upstream.bodies()[-1]
    assert judged["model"] == "fake-model" and judged["messages"][-1]["role"] == "user"


def test_flagged_chat_input_is_refused_as_a_content_filter_and_no_model_sees_it(stack: Stack) -> None:
    before = stack.chat_calls()
    completion = stack.client.chat.completions.create(model="fake-model", messages=[{"role": "user", "content": "[flag:violence] hurt"}])
    choice = completion.choices[0]
    assert choice.finish_reason == "content_filter" and choice.message.refusal == "I can't help with that."
    assert choice.message.content is None and completion.id.startswith("chatcmpl-")
    chunks = list(stack.client.chat.completions.create(model="fake-model", stream=True, stream_options={"include_usage": True},
                                                       messages=[{"role": "user", "content": "[flag:hate] words"}]))
    assert chunks[0].choices[0].delta.refusal == "I can't help with that."
    assert chunks[1].choices[0].finish_reason == "content_filter" and chunks[-1].usage is not None
    assert stack.chat_calls() == before


def test_chat_checks_only_what_a_request_adds_after_the_last_answer(stack: Stack) -> None:
    before = stack.chat_calls()
    completion = stack.client.chat.completions.create(model="fake-model", messages=[
        {"role": "user", "content": "[flag:violence] an old message, answered before"},
        {"role": "assistant", "content": "I can't help with that."},
        {"role": "user", "content": "[tokens:2] a new, calm one"}])
    assert completion.choices[0].message.content == "tok1 tok2" and stack.chat_calls() == before + 1
    assert stack.upstream.bodies("/v1/moderations")[-1]["input"] == ["[tokens:2] a new, calm one"]


CALM = ("The sea was calm and the boats stayed in the harbour. " * 10).strip()  # 549 characters: more than one batch


@pytest.fixture(scope="module", params=["server", "library"])
def guarded(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A stack whose safety provider checks model output (and not input)."""
    with moderated(request.param, tmp_path_factory.mktemp("output-guard"), check_output=True) as stack:
        yield stack


def _answer(text: str) -> str:
    return f"[answer {json.dumps({'text': text})}]"


def test_clean_output_streams_through_checked_in_batches(guarded: Stack) -> None:
    before = len(guarded.upstream.bodies("/v1/moderations"))
    events = list(guarded.client.responses.create(model="fake-reasoner", input=_answer(CALM), stream=True))
    final = events[-1].response  # type: ignore[union-attr]
    assert final.status == "completed" and final.output_text == CALM
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == CALM  # type: ignore[union-attr]
    checks = guarded.upstream.bodies("/v1/moderations")[before:]
    assert 2 <= len(checks) <= 4  # batches of text, not a check per token
    assert "".join(check["input"][0] for check in checks) == final.output[0].content[0].text + CALM  # reasoning, then the answer


def test_flagged_output_is_stopped_before_any_client_sees_it(guarded: Stack) -> None:
    flagged = CALM + " Then [flag:violence] something terrible. " + CALM
    events = list(guarded.client.responses.create(model="fake-model", input=_answer(flagged), stream=True))
    sent = "".join(e.delta for e in events if e.type == "response.output_text.delta")  # type: ignore[union-attr]
    assert "[flag:violence]" not in sent and sent and CALM.startswith(sent)
    final = events[-1]
    assert final.type == "response.incomplete" and final.response.incomplete_details.reason == "content_filter"  # type: ignore[union-attr]
    assert final.response.output_text == sent  # type: ignore[union-attr]
    stored = guarded.client.responses.retrieve(final.response.id)  # type: ignore[union-attr]
    assert stored.output_text == sent and stored.status == "incomplete"


def test_a_flagged_answer_that_is_not_streamed_is_not_returned(guarded: Stack) -> None:
    response = guarded.client.responses.create(model="fake-model", input=_answer("[flag:hate] words"))
    assert response.status == "incomplete" and response.incomplete_details is not None
    assert response.incomplete_details.reason == "content_filter" and "[flag:hate]" not in response.output_text


def test_flagged_chat_input_asked_to_be_stored_is_stored_as_refused(stack: Stack) -> None:
    completion = stack.client.chat.completions.create(model="fake-model", store=True, metadata={"case": "refused"},
                                                      messages=[{"role": "user", "content": "[flag:violence] hurt"}])
    stored = stack.client.chat.completions.retrieve(completion.id)
    assert stored.choices[0].finish_reason == "content_filter" and stored.choices[0].message.refusal == "I can't help with that."
    assert [m.content for m in stack.client.chat.completions.messages.list(completion.id)] == ["[flag:violence] hurt"]


def _chat_text(chunks: list[openai.types.chat.ChatCompletionChunk]) -> str:
    return "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)


def test_clean_chat_output_streams_through_checked_in_batches_and_is_stored(guarded: Stack) -> None:
    before = len(guarded.upstream.bodies("/v1/moderations"))
    chunks = list(guarded.client.chat.completions.create(model="fake-model", stream=True, store=True,
                                                         messages=[{"role": "user", "content": _answer(CALM)}]))
    assert _chat_text(chunks) == CALM and chunks[-1].choices[0].finish_reason == "stop"
    checks = guarded.upstream.bodies("/v1/moderations")[before:]
    assert 2 <= len(checks) <= 4 and "".join(check["input"][0] for check in checks) == CALM
    stored = guarded.client.chat.completions.retrieve(chunks[0].id)
    assert stored.choices[0].message.content == CALM


def test_flagged_chat_output_is_stopped_before_any_client_sees_it_and_stored_as_sent(guarded: Stack) -> None:
    flagged = CALM + " Then [flag:violence] something terrible. " + CALM
    chunks = list(guarded.client.chat.completions.create(model="fake-model", stream=True, store=True,
                                                         messages=[{"role": "user", "content": _answer(flagged)}]))
    sent = _chat_text(chunks)
    assert "[flag:violence]" not in sent and sent and CALM.startswith(sent)
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["content_filter"]
    stored = guarded.client.chat.completions.retrieve(chunks[0].id)
    assert stored.choices[0].message.content == sent and stored.choices[0].finish_reason == "content_filter"


def test_a_flagged_chat_answer_that_is_not_streamed_is_withheld(guarded: Stack) -> None:
    completion = guarded.client.chat.completions.create(model="fake-model", store=True,
                                                        messages=[{"role": "user", "content": _answer("[flag:hate] words")}])
    choice = completion.choices[0]
    assert choice.finish_reason == "content_filter" and choice.message.content is None
    assert guarded.client.chat.completions.retrieve(completion.id).choices[0].finish_reason == "content_filter"
    clean = guarded.client.chat.completions.create(model="fake-model", messages=[{"role": "user", "content": _answer("calm words")}])
    assert clean.choices[0].message.content == "calm words" and clean.choices[0].finish_reason == "stop"


def test_a_chat_output_guard_that_fails_closed_ends_the_stream_with_an_error(guarded: Stack) -> None:
    with pytest.raises(openai.APIStatusError) as refused:
        guarded.client.chat.completions.create(model="fake-model", messages=[{"role": "user", "content": _answer("[moderation-error:500] x")}])
    assert refused.value.status_code == 503 and refused.value.body["code"] == "guardrail_unavailable"  # type: ignore[index]


def test_a_flagged_prompt_of_the_legacy_api_is_answered_as_filtered_and_no_model_sees_it(stack: Stack) -> None:
    before = len(stack.upstream.bodies("/v1/completions"))
    completion = stack.client.completions.create(model="fake-model", prompt=["[flag:violence] hurt", "calm"], n=2)
    assert [(choice.index, choice.text, choice.finish_reason) for choice in completion.choices] == [
        (index, "", "content_filter") for index in range(4)]
    chunks = list(stack.client.completions.create(model="fake-model", prompt="[flag:hate] words", stream=True,
                                                  stream_options={"include_usage": True}))
    assert chunks[0].choices[0].finish_reason == "content_filter" and chunks[-1].usage is not None
    assert len(stack.upstream.bodies("/v1/completions")) == before
    clean = stack.client.completions.create(model="fake-model", prompt="[tokens:2] calm")
    assert clean.choices[0].text == "tok1 tok2" and len(stack.upstream.bodies("/v1/completions")) == before + 1


def test_legacy_completion_output_is_checked_streamed_or_not(guarded: Stack) -> None:
    flagged = CALM + " Then [flag:violence] something terrible. " + CALM
    chunks = list(guarded.client.completions.create(model="fake-model", prompt=_answer(flagged), max_tokens=500, stream=True))
    sent = "".join(chunk.choices[0].text for chunk in chunks if chunk.choices)
    assert "[flag:violence]" not in sent and sent and CALM.startswith(sent)
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["content_filter"]
    withheld = guarded.client.completions.create(model="fake-model", prompt=_answer("[flag:hate] words"), n=2)
    assert [(choice.text, choice.finish_reason) for choice in withheld.choices] == [("", "content_filter")] * 2
    clean = list(guarded.client.completions.create(model="fake-model", prompt=_answer(CALM), max_tokens=500, stream=True))
    assert "".join(chunk.choices[0].text for chunk in clean if chunk.choices) == CALM
    assert [c.choices[0].finish_reason for c in clean if c.choices and c.choices[0].finish_reason] == ["stop"]


# Guardrails a request names (OGX's `guardrails` extension of Responses): both checks run on it,
# whatever run.yaml switches on for every request.

@pytest.fixture(scope="module", params=["server", "library"])
def on_request(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A stack whose safety provider (`moderation`) checks only the requests that name it."""
    with moderated(request.param, tmp_path_factory.mktemp("on-request")) as stack:
        yield stack


def _hidden_flag(category: str, text: str) -> str:
    """An [answer] whose text holds `[flag:category]`, while the request's own text does not."""
    return '[answer {"text": "\\u005bflag:' + category + '] ' + text + '"}]'


def test_a_request_naming_no_guardrail_is_not_checked(on_request: Stack) -> None:
    before = len(on_request.upstream.bodies("/v1/moderations"))
    response = on_request.client.responses.create(model="fake-model", input="[flag:violence] [tokens:1] unchecked")
    assert response.output_text == "tok1" and len(on_request.upstream.bodies("/v1/moderations")) == before


@pytest.mark.parametrize("guardrail", ["moderation", {"type": "moderation"}, "omni-moderation-latest"])
def test_flagged_input_of_a_request_naming_the_guardrail_is_refused_and_no_model_sees_it(on_request: Stack, guardrail: object) -> None:
    before = on_request.chat_calls()
    response = on_request.client.responses.create(model="fake-model", input="[flag:violence] hurt them",
                                                  extra_body={"guardrails": [guardrail]})
    (message,) = response.output
    assert [(part.type, getattr(part, "refusal", None)) for part in message.content] == [("refusal", "I can't help with that.")]
    assert on_request.chat_calls() == before


def test_output_of_a_request_naming_the_guardrail_is_checked_streamed_or_not(on_request: Stack) -> None:
    assert "[flag:" not in _hidden_flag("hate", "words")
    response = on_request.client.responses.create(model="fake-model", input=_hidden_flag("hate", "words"),
                                                  extra_body={"guardrails": ["moderation"]})
    assert response.status == "incomplete" and response.incomplete_details is not None
    assert response.incomplete_details.reason == "content_filter" and "flag:hate" not in response.output_text
    events = list(on_request.client.responses.create(model="fake-model", input=_hidden_flag("violence", "terrible"), stream=True,
                                                     extra_body={"guardrails": ["moderation"]}))
    assert events[-1].type == "response.incomplete" and "flag:" not in events[-1].response.output_text  # type: ignore[union-attr]
    unchecked = on_request.client.responses.create(model="fake-model", input=_hidden_flag("hate", "words"))
    assert unchecked.status == "completed" and unchecked.output_text == "[flag:hate] words"


def test_a_background_response_naming_the_guardrail_is_checked_when_it_runs(on_request: Stack) -> None:
    queued = on_request.client.responses.create(model="fake-model", input=_hidden_flag("hate", "words"), background=True,
                                                extra_body={"guardrails": ["moderation"]})
    done = queued
    for _ in range(200):
        done = on_request.client.responses.retrieve(queued.id)
        if done.status not in ("queued", "in_progress"):
            break
        time.sleep(0.05)
    assert done.status == "incomplete" and done.incomplete_details is not None and done.incomplete_details.reason == "content_filter"


@pytest.mark.parametrize(("guardrails", "param"), [(["nope"], "guardrails[0]"), (["moderation", {"type": "x"}], "guardrails[1]"),
                                                   ([""], "guardrails[0]"), ([{"type": "moderation", "x": 1}], "guardrails[0]"),
                                                   ([5], "guardrails[0]")])
def test_a_guardrail_this_server_does_not_have_is_a_400_naming_it(on_request: Stack, guardrails: list[object], param: str) -> None:
    before = on_request.chat_calls()
    with pytest.raises(openai.BadRequestError) as refused:
        on_request.client.responses.create(model="fake-model", input="hi", extra_body={"guardrails": guardrails})
    assert refused.value.body["param"] == param and on_request.chat_calls() == before  # type: ignore[index]


def test_guardrails_named_on_a_server_without_a_safety_provider_are_a_503(tmp_path: Path) -> None:
    with running_fake_upstream() as upstream, LibraryClient(run_yaml(tmp_path, upstream.base_url), env={}) as library:
        client = library.openai(max_retries=0)
        with pytest.raises(openai.APIStatusError) as refused:
            client.responses.create(model="fake-model", input="[tokens:1] hi", extra_body={"guardrails": ["moderation"]})
        assert refused.value.status_code == 503 and "safety provider" in refused.value.message
        assert upstream.bodies("/v1/chat/completions") == []
