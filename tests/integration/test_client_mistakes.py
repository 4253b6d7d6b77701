"""A client's mistake is a 4xx in the OpenAI error shape on every route, never a 500."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlencode

import httpx2
import openai
import pytest

MALFORMED_BODIES = [b"", b"null", b"[]", b"123", b"{", b'"text"', b"\xff\xfe",
                    # A lone surrogate: JSON's grammar takes it, but it is no Unicode text (no store or model can encode it).
                    b'{"model": "fake-model", "input": "a\\ud800", "messages": [{"role": "user", "content": "a\\ud800"}], "prompt": "\\udfff"}']
JSON_ROUTES = ["/responses", "/chat/completions", "/completions", "/embeddings", "/conversations/conv_x/items", "/responses/input_tokens"]
BROWSER_OF_ANOTHER_SITE = {"origin": "https://evil.example", "sec-fetch-site": "cross-site", "authorization": openai.Omit()}
"""What a browser adds to the request a page of another site makes it send (and the key it cannot add)."""

WRONG_TYPES: list[tuple[str, dict[str, Any]]] = [
    ("/responses", {"model": "fake-model", "input": 5}),
    ("/responses", {"model": "fake-model", "input": "x", "store": "sometimes"}),
    ("/responses", {"model": "fake-model", "input": "x", "tools": {}}),
    ("/responses", {"model": "fake-model", "input": "x", "max_output_tokens": "many"}),
    ("/responses", {"model": "fake-model", "input": "x", "metadata": ["a"]}),
    ("/responses", {"model": "fake-model", "input": "x", "truncation": "sometimes"}),
    ("/responses", {"model": "fake-model", "input": "x", "include": "all"}),
    ("/responses", {"model": "fake-model", "input": [5]}),
    ("/responses", {"model": "fake-model", "input": [{"role": "user", "content": [{"type": "input_image", "image_url": None}]}]}),
    ("/responses", {"model": ["fake-model"], "input": "x"}),
    ("/responses", {"model": "fake-model", "input": [{"type": "reasoning", "summary": True}]}),
    ("/responses", {"model": "fake-model", "input": [{"type": "reasoning", "summary": [], "content": [5]}]}),
    ("/responses", {"model": "fake-model", "input": [{"type": "reasoning", "summary": [], "encrypted_content": 5}]}),
    ("/responses", {"model": "fake-model", "input": [{"type": "item_reference", "id": []}]}),
    ("/responses", {"model": "fake-model", "input": "x", "tool_choice": {"type": "allowed_tools", "tools": 5}}),
    ("/responses", {"model": "fake-model", "input": "x", "tool_choice": {"type": "allowed_tools", "tools": [5]}}),
    ("/chat/completions", {"model": "fake-model", "messages": {}}),
    ("/chat/completions", {"model": "fake-model", "messages": [{"role": "user", "content": "x"}], "store": True, "metadata": {"k": 5}}),
    ("/chat/completions", {"model": 5, "messages": [{"role": "user", "content": "x"}]}),
    ("/embeddings", {"model": "fake-embed"}),
    ("/conversations", {"items": {}}),
    ("/conversations", {"metadata": "x"}),
]


def post_raw(client: openai.OpenAI, path: str, content: bytes) -> httpx2.Response:
    return client.post(path, cast_to=httpx2.Response, content=content, options={"headers": {"content-type": "application/json"}})


@pytest.mark.parametrize("path", JSON_ROUTES)
@pytest.mark.parametrize("content", MALFORMED_BODIES, ids=repr)
def test_a_body_that_is_not_a_json_object_is_a_400(openai_client: openai.OpenAI, path: str, content: bytes) -> None:
    with pytest.raises(openai.APIStatusError) as error:
        post_raw(openai_client, path, content)
    assert 400 <= error.value.status_code < 500
    assert isinstance(error.value.body, dict) and set(error.value.body) == {"message", "type", "param", "code"}


@pytest.mark.parametrize("path", [*JSON_ROUTES, "/responses/compact"])
def test_a_lone_surrogate_is_not_json_text_on_any_route(openai_client: openai.OpenAI, path: str) -> None:
    content = b'{"model": "fake-model", "input": "a\\ud800 [tokens:1]", "messages": [{"role": "user", "content": "\\ud800"}], "prompt": "\\ud800"}'
    with pytest.raises(openai.BadRequestError) as error:
        post_raw(openai_client, path, content)
    assert error.value.code == "invalid_json"


@pytest.mark.parametrize("content_type", ["text/plain;charset=UTF-8", "application/x-www-form-urlencoded", None])
@pytest.mark.parametrize("path", [*JSON_ROUTES, "/conversations", "/vector_stores"])
def test_a_body_not_declared_json_is_a_415_and_nothing_runs(openai_client: openai.OpenAI, text_model: str, path: str,
                                                            content_type: str | None) -> None:
    # What a web page of another site can make a browser send anywhere without a CORS preflight:
    # the stored chat completion it asks for must not be made.
    body = json.dumps({"model": text_model, "messages": [{"role": "user", "content": "csrf"}], "store": True,
                       "metadata": {"probe": "csrf"}}).encode()
    headers = {"content-type": content_type if content_type is not None else openai.Omit(), **BROWSER_OF_ANOTHER_SITE}
    with pytest.raises(openai.APIStatusError) as refused:
        openai_client.post(path, cast_to=httpx2.Response, content=body, options={"headers": headers})
    assert refused.value.status_code == 415
    body_error = refused.value.body
    assert isinstance(body_error, dict) and (body_error["type"], body_error["param"], body_error["code"]) == (
        "invalid_request_error", None, "unsupported_content_type")
    if content_type == "application/x-www-form-urlencoded":
        assert "not from a browser page of another origin" in body_error["message"]
    else:
        assert body_error["message"] == (f"Unsupported content type: {repr(content_type) if content_type else 'none'}. A request "
                                         "body must be JSON (Content-Type: application/json), or multipart/form-data for file uploads.")
    assert not openai_client.chat.completions.list(metadata={"probe": "csrf"}).data


@pytest.mark.parametrize("browser", [BROWSER_OF_ANOTHER_SITE, {"origin": "https://evil.example", "authorization": openai.Omit()},
                                     {"origin": "http://localhost:3000", "sec-fetch-site": "same-site", "authorization": openai.Omit()}],
                         ids=["cross-site", "origin-only", "same-site"])
def test_a_file_upload_from_a_browser_page_of_another_origin_is_refused_and_stores_nothing(openai_client: openai.OpenAI,
                                                                                           browser: dict[str, Any]) -> None:
    # A multipart form is what any web page can make a browser send to a server on the user's machine;
    # the browser says where the page is from (a program, which says nothing, is read: test_ogx_clients.py).
    before = {file.id for file in openai_client.files.list()}
    with pytest.raises(openai.APIStatusError) as refused:
        openai_client.post("/files", cast_to=httpx2.Response, body={"purpose": "assistants"},
                           files=[("file", ("csrf.txt", b"planted", "text/plain"))],
                           options={"headers": {**browser, "content-type": "multipart/form-data"}})
    assert refused.value.status_code == 415 and refused.value.body["code"] == "unsupported_content_type"  # type: ignore[index]
    assert "from a browser page of another origin" in refused.value.message
    assert {file.id for file in openai_client.files.list()} == before
    uploaded = openai_client.files.create(file=("fine.txt", b"fine"), purpose="assistants")  # the SDK sends its key
    assert uploaded.filename == "fine.txt" and openai_client.files.delete(uploaded.id).deleted


def test_a_form_body_is_read_on_the_responses_routes(openai_client: openai.OpenAI, text_model: str) -> None:
    form = {"content-type": "application/x-www-form-urlencoded"}
    body = urlencode({"model": text_model, "input": "[tokens:3] hi", "max_output_tokens": "16", "metadata": '{"via": "form"}',
                      "include": "reasoning.encrypted_content", "store": "true"}).encode()
    created = openai_client.post("/responses", cast_to=httpx2.Response, content=body, options={"headers": form})  # the SDK sends its key
    response = created.json()
    assert response["status"] == "completed" and response["metadata"] == {"via": "form"} and response["max_output_tokens"] == 16
    assert openai_client.responses.retrieve(response["id"]).output_text == response["output"][0]["content"][0]["text"]
    counted = openai_client.post("/responses/input_tokens", cast_to=httpx2.Response, options={"headers": form},
                                 content=urlencode({"model": text_model, "input": "42"}).encode())
    assert counted.json()["input_tokens"] > 0  # "42" read as the text it is
    # From a browser page of another site, a form is what any web page can make a browser send: refused.
    with pytest.raises(openai.APIStatusError) as refused:
        openai_client.post("/responses", cast_to=httpx2.Response, content=body,
                           options={"headers": {**form, **BROWSER_OF_ANOTHER_SITE}})
    assert refused.value.status_code == 415 and "not from a browser page of another origin" in refused.value.message
    with pytest.raises(openai.APIStatusError) as elsewhere:  # and forms are read on those routes only
        openai_client.post("/conversations", cast_to=httpx2.Response, content=b"metadata=%7B%7D", options={"headers": form})
    assert elsewhere.value.status_code == 415 and "POST /v1/responses," in elsewhere.value.message


@pytest.mark.parametrize("content_type", ["application/json; charset=utf-8", "Application/JSON", "application/vnd.openai+json"])
def test_json_is_read_whatever_its_parameters_and_case(openai_client: openai.OpenAI, content_type: str) -> None:
    created = openai_client.post("/conversations", cast_to=httpx2.Response, content=b'{"metadata": {"k": "v"}}',
                                 options={"headers": {"content-type": content_type}})
    assert created.json()["metadata"] == {"k": "v"}


@pytest.mark.parametrize(("path", "body"), WRONG_TYPES)
def test_a_field_of_the_wrong_type_is_a_400_naming_it(openai_client: openai.OpenAI, path: str, body: dict[str, Any]) -> None:
    with pytest.raises(openai.APIStatusError) as error:
        openai_client.post(path, cast_to=object, body=body)
    assert error.value.status_code in (400, 404)
    assert error.value.param, error.value.message


@pytest.mark.parametrize(("messages", "param"), [
    (["hi"], "messages[0]"),
    ([{"role": "user", "content": "a"}, {"role": "robot", "content": "b"}], "messages[1].role"),
    ([{"content": "no role"}], "messages[0].role"),
])
def test_chat_messages_that_are_not_messages_are_400s(openai_client: openai.OpenAI, text_model: str, messages: Any, param: str) -> None:
    with pytest.raises(openai.BadRequestError) as error:
        openai_client.chat.completions.create(model=text_model, messages=messages, store=True)
    assert error.value.param == param


@pytest.mark.parametrize(("messages", "param", "code"), [
    ([{"role": "user"}], "messages[0].content", "missing_required_parameter"),
    ([{"role": "user", "content": []}], "messages[0].content", "empty_array"),
    ([{"role": "user", "content": 42}], "messages[0].content", "invalid_type"),
    ([{"role": "user", "content": ["hi"]}], "messages[0].content[0]", "invalid_type"),
    ([{"role": "user", "content": [{"text": "hi"}]}], "messages[0].content[0].type", "missing_required_parameter"),
    ([{"role": "user", "content": [{"type": "text"}]}], "messages[0].content[0].text", "missing_required_parameter"),
    ([{"role": "user", "content": [{"type": "text", "text": 5}]}], "messages[0].content[0].text", "invalid_type"),
    ([{"role": "user", "content": [{"type": "image_url", "image_url": "https://x/y.png"}]}], "messages[0].content[0].image_url",
     "invalid_type"),
    ([{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}], "messages[0].content[0].image_url.url",
     "missing_required_parameter"),
    ([{"role": "system", "content": [{"type": "image_url", "image_url": {"url": "https://x/y.png"}}]},
      {"role": "user", "content": "hi"}], "messages[0]", "invalid_value"),
    ([{"role": "user", "content": [{"type": "refusal", "refusal": "no"}]}], "messages[0]", "invalid_value"),
    ([{"role": "user", "content": "hi"}, {"role": "assistant"}], "messages[1].content", "missing_required_parameter"),
    ([{"role": "user", "content": "hi"}, {"role": "tool", "content": "42"}], "messages[1].tool_call_id", "missing_required_parameter"),
])
def test_chat_message_contents_are_checked_as_openai_checks_them(openai_client: openai.OpenAI, text_model: str, messages: Any,
                                                                 param: str, code: str) -> None:
    with pytest.raises(openai.BadRequestError) as error:
        openai_client.chat.completions.create(model=text_model, messages=messages)
    assert (error.value.param, error.value.code) == (param, code), error.value.message


@pytest.mark.parametrize(("field", "value", "code"), [
    ("temperature", 2.5, "decimal_above_max_value"),
    ("top_p", -0.1, "decimal_below_min_value"),
    ("presence_penalty", "high", "invalid_type"),
    ("frequency_penalty", True, "invalid_type"),
    ("n", 0, "integer_below_min_value"),
    ("n", 1.5, "invalid_type"),
    ("max_tokens", 0, "integer_below_min_value"),
    ("max_completion_tokens", -3, "integer_below_min_value"),
    ("top_logprobs", 21, "integer_above_max_value"),
])
def test_chat_numbers_out_of_range_are_400s_as_openai_words_them(openai_client: openai.OpenAI, text_model: str, field: str, value: Any,
                                                                 code: str) -> None:
    """Checked before the upstream: some servers clamp a bad value silently where OpenAI refuses it."""
    with pytest.raises(openai.BadRequestError) as error:
        openai_client.chat.completions.create(model=text_model, messages=[{"role": "user", "content": "hi"}], extra_body={field: value})
    assert error.value.param == field and error.value.code == code


@pytest.mark.parametrize("path", ["/chat/completions", "/completions"])
@pytest.mark.parametrize(("field", "value", "code"), [
    ("stop", 5, "invalid_type"),
    ("stop", ["end", 2], "invalid_type"),
    ("seed", "42", "invalid_type"),
    ("seed", 1.5, "invalid_type"),
    ("logit_bias", [1], "invalid_type"),
    ("logit_bias", {"token": 5}, "invalid_value"),
    ("logit_bias", {"50256": -101}, "invalid_value"),
    ("user", 7, "invalid_type"),
])
def test_stop_seed_logit_bias_and_user_of_the_wrong_shape_are_400s(openai_client: openai.OpenAI, text_model: str, path: str, field: str,
                                                                   value: Any, code: str) -> None:
    """Checked before any provider: the embedded model's binding failed on them with a 500."""
    body = {"model": text_model, field: value, **({"prompt": "hi"} if path == "/completions" else {"messages": [{"role": "user", "content": "hi"}]})}
    with pytest.raises(openai.BadRequestError) as error:
        openai_client.post(path, cast_to=object, body=body)
    assert error.value.param == field and error.value.code == code, error.value.message


@pytest.mark.parametrize(("value", "code"), [(True, "invalid_type"), (["text", 5], "invalid_type"), (["video"], "invalid_value")])
def test_chat_modalities_of_the_wrong_shape_are_400s(openai_client: openai.OpenAI, text_model: str, value: Any, code: str) -> None:
    with pytest.raises(openai.BadRequestError) as error:
        openai_client.chat.completions.create(model=text_model, messages=[{"role": "user", "content": "hi"}], extra_body={"modalities": value})
    assert error.value.param == "modalities" and error.value.code == code


def test_chat_numbers_at_their_bounds_pass(openai_client: openai.OpenAI, text_model: str) -> None:
    completion = openai_client.chat.completions.create(model=text_model, messages=[{"role": "user", "content": "bounds"}],
                                                       temperature=2, top_p=0, presence_penalty=-2, frequency_penalty=2.0, n=1,
                                                       max_tokens=64, extra_body={"vendor_knob": 7})
    assert completion.choices[0].message.content


def test_a_past_mcp_call_of_any_shape_is_read_not_a_500(openai_client: openai.OpenAI, text_model: str) -> None:
    # Items a client replays are its own: fields of odd shapes are read as far as they make sense.
    response = openai_client.responses.create(model=text_model, store=False, input=[
        {"type": "mcp_call", "id": "mcp_odd", "server_label": "docs", "name": "lookup", "arguments": "{}", "output": None,
         "content": True, "error": "the server went away"},
        {"role": "user", "content": "[tokens:2] go on"}])  # type: ignore[list-item]
    assert response.status == "completed" and response.output_text == "tok1 tok2"


def test_past_search_calls_of_any_shape_are_read_not_a_500(openai_client: openai.OpenAI, text_model: str) -> None:
    response = openai_client.responses.create(model=text_model, store=False, input=[
        {"type": "file_search_call", "id": "fs_odd", "status": "completed", "queries": True, "results": [5, {"text": "kept"}]},
        {"type": "web_search_call", "id": "ws_odd", "status": "completed", "action": {"type": "search", "query": "q", "sources": 7}},
        {"role": "user", "content": "[tokens:2] go on"}])  # type: ignore[list-item]
    assert response.status == "completed" and response.output_text == "tok1 tok2"


def test_an_upstream_answer_of_the_wrong_shape_is_a_502_never_a_server_error(openai_client: openai.OpenAI, text_model: str) -> None:
    # JSON, but the content a number: a model server's bug is the upstream's error, whatever reads it.
    with pytest.raises(openai.APIStatusError) as whole:
        openai_client.responses.create(model=text_model, input="[tokens:3] [misshapen]")
    assert whole.value.status_code == 502 and whole.value.body["code"] == "upstream_malformed"  # type: ignore[index]
    events = list(openai_client.responses.create(model=text_model, input="[tokens:3] [misshapen]", stream=True))
    assert events[-1].type == "response.failed" and "upstream_malformed" in events[-1].response.error.message  # type: ignore[union-attr]
    with pytest.raises(openai.APIError) as stored:
        list(openai_client.chat.completions.create(model=text_model, messages=[{"role": "user", "content": "[tokens:3] [misshapen]"}],
                                                   stream=True, store=True))
    assert "chat completion chunk's shape" in stored.value.message
