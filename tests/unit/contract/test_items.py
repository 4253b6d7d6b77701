"""Items of the Responses and Conversations APIs: normalised and checked."""

from __future__ import annotations

import pytest

from contract.items import normalize_input
from contract.errors import InvalidRequestError


def test_a_string_is_one_user_message_with_an_id() -> None:
    [item] = normalize_input("hi")
    assert item["id"].startswith("msg_")
    assert {k: item[k] for k in ("type", "role", "content", "status")} == {
        "type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}], "status": "completed"}


def test_easy_messages_get_their_full_form() -> None:
    user, assistant = normalize_input([{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}])
    assert user["content"] == [{"type": "input_text", "text": "q"}]
    assert assistant["content"] == [{"type": "output_text", "text": "a", "annotations": []}]


@pytest.mark.parametrize(("raw", "param"), [
    ([{"type": "nope"}], "input[0].type"),
    ([{"role": "robot", "content": "x"}], "input[0].role"),
    ([{"role": "user", "content": [{"type": "input_video"}]}], "input[0].content[0].type"),
    ([{"role": "user", "content": 5}], "input[0].content"),
    ([{"type": "function_call", "name": "f", "arguments": "{}"}], "input[0].call_id"),
    ([{"type": "function_call_output", "call_id": "c"}], "input[0].output"),
    ([{"role": "user", "content": [{"type": "input_image"}]}], "input[0].content[0].image_url"),
    ([{"type": "function_call_output", "call_id": "c", "output": 5}], "input[0].output"),
    ([{"type": "function_call_output", "call_id": "c", "output": [{"type": "refusal", "refusal": "no"}]}], "input[0].output[0].type"),
    ([{"type": "function_call_output", "call_id": "c", "output": [{"type": "input_image"}]}], "input[0].output[0].image_url"),
    (42, "input"),
])
def test_malformed_items_name_the_offending_field(raw: object, param: str) -> None:
    with pytest.raises(InvalidRequestError) as error:
        normalize_input(raw)
    assert error.value.param == param




def test_a_function_output_may_carry_text_image_and_file_parts() -> None:
    [item] = normalize_input([{"type": "function_call_output", "call_id": "c", "output": [
        {"type": "input_text", "text": "see"}, {"type": "input_image", "file_id": "file-1"}, {"type": "input_file", "file_id": "file-2"}]}])
    assert item["output"] == [{"type": "input_text", "text": "see"}, {"type": "input_image", "file_id": "file-1", "detail": "auto"},
                              {"type": "input_file", "file_id": "file-2"}]


def test_web_search_sources_are_shown_only_when_included() -> None:
    from contract.items import shown_item

    item = {"type": "web_search_call", "id": "ws_1", "status": "completed",
            "action": {"type": "search", "query": "q", "sources": [{"type": "url", "url": "https://a.example"}]}}
    hidden = shown_item(item, frozenset())
    assert hidden["action"] == {"type": "search", "query": "q", "sources": None}
    assert item["action"]["sources"] == [{"type": "url", "url": "https://a.example"}]  # the stored item is untouched
    assert shown_item(item, frozenset({"web_search_call.action.sources"})) is item


def test_items_kept_as_text_are_parsed_only_when_they_may_have_fields_to_leave_out() -> None:
    from contract.items import ItemText, shown_items
    from contract import fastjson

    message = ItemText("msg_1", fastjson.dumps({"id": "msg_1", "type": "message", "role": "user",
                                                "content": [{"type": "input_text", "text": "web_search_call is a type"}]}).decode())
    search = ItemText("ws_1", fastjson.dumps({"id": "ws_1", "type": "web_search_call", "status": "completed",
                                              "action": {"type": "search", "query": "q", "sources": [{"type": "url", "url": "https://a.example"}]}}).decode())
    plain = [message, message]
    assert shown_items(plain, frozenset()) is plain  # nothing to leave out: not even parsed
    shown = shown_items([message, search], frozenset())
    assert shown[0] is message
    assert shown[1] == {"id": "ws_1", "type": "web_search_call", "status": "completed",
                        "action": {"type": "search", "query": "q", "sources": None}}
    assert shown_items([search], frozenset({"web_search_call.action.sources"})) == [search.parsed()]


@pytest.mark.parametrize("kind", [["message"], {"type": "message"}, 5])
def test_an_item_or_part_type_of_another_shape_is_a_400_not_a_500(kind: object) -> None:
    """Found by mutating valid requests: a list or object as `type` was looked up in a table."""
    with pytest.raises(InvalidRequestError) as refused:
        normalize_input([{"type": kind}])
    assert refused.value.param == "input[0].type"
    with pytest.raises(InvalidRequestError) as refused:
        normalize_input([{"role": "user", "content": [{"type": kind, "text": "x"}]}])
    assert refused.value.param == "input[0].content[0].type"
