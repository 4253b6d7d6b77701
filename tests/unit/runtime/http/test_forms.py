"""A form body read as the JSON object it stands for."""

from __future__ import annotations

from urllib.parse import urlencode

from runtime.http.forms import FormFields, form_document

FIELDS = FormFields(texts=frozenset({"model", "input"}), lists=frozenset({"include", "tools"}))


def test_values_that_are_json_are_read_as_json_and_the_rest_as_text() -> None:
    body = urlencode({"model": "gpt-4o", "stream": "true", "max_output_tokens": "64", "temperature": "0.5",
                      "metadata": '{"k": "v"}', "instructions": "Be brief", "previous_response_id": "null"}).encode()
    assert form_document(body, FIELDS) == {"model": "gpt-4o", "stream": True, "max_output_tokens": 64, "temperature": 0.5,
                                           "metadata": {"k": "v"}, "instructions": "Be brief", "previous_response_id": None}


def test_a_text_field_keeps_what_would_read_as_a_number_but_takes_json_structure() -> None:
    assert form_document(b"input=42&model=true", FIELDS) == {"input": "42", "model": "true"}
    assert form_document(urlencode({"input": '[{"role": "user", "content": "hi"}]'}).encode(), FIELDS) == {
        "input": [{"role": "user", "content": "hi"}]}


def test_a_name_given_twice_is_a_list_and_a_list_field_given_once_a_list_of_one() -> None:
    assert form_document(b"include=a&include=b&include=c&x=1&x=2", FIELDS) == {"include": ["a", "b", "c"], "x": [1, 2]}
    assert form_document(b"include=reasoning.encrypted_content", FIELDS) == {"include": ["reasoning.encrypted_content"]}
    tool = '{"type": "function", "name": "f"}'
    assert form_document(urlencode({"tools": tool}).encode(), FIELDS) == {"tools": [{"type": "function", "name": "f"}]}


def test_encoding_blank_values_and_bytes_that_are_not_utf8() -> None:
    assert form_document(b"input=hello+there%21&instructions=", FIELDS) == {"input": "hello there!", "instructions": ""}
    assert form_document(b"input=%ff", FIELDS) == {"input": "\ufffd"}
    assert form_document(b"", FIELDS) == {}
