"""Which tool outputs a context may hold: each answers a call made before it (issue 45)."""

from __future__ import annotations

from typing import Any

import pytest

from contract.errors import InvalidRequestError
from providers.responses.context import check_call_outputs


def call(call_id: str, kind: str = "function_call") -> dict[str, Any]:
    return {"type": kind, "call_id": call_id, "name": "f", "arguments": "{}", "input": ""}


def output(call_id: str, kind: str = "function_call_output") -> dict[str, Any]:
    return {"type": kind, "call_id": call_id, "output": "x"}


def test_an_output_answers_a_call_of_the_history_or_of_the_input_before_it() -> None:
    check_call_outputs([call("a")], [output("a")])
    check_call_outputs([], [call("b"), output("b")])
    check_call_outputs([call("c", "custom_tool_call")], [output("c", "custom_tool_call_output")])


@pytest.mark.parametrize(("history", "items"), [
    ([], [output("a")]),
    ([], [output("a"), call("a")]),  # the call must come first
    ([call("a", "custom_tool_call")], [output("a")]),  # a custom call is not answered by a function output
    ([call("a")], [output("b")]),
])
def test_an_output_answering_no_call_is_openais_400(history: list[dict[str, Any]], items: list[dict[str, Any]]) -> None:
    with pytest.raises(InvalidRequestError) as refused:
        check_call_outputs(history, items)
    assert refused.value.param == "input" and refused.value.code is None
    assert refused.value.message.startswith("No tool call found for ")


def test_outputs_after_a_compaction_are_taken_their_calls_being_out_of_sight() -> None:
    check_call_outputs([{"type": "compaction", "encrypted_content": "..."}], [output("gone")])


def test_a_history_with_outputs_of_its_own_is_not_read_again() -> None:
    check_call_outputs([output("old, before any compaction")], [{"type": "message", "role": "user", "content": "hi"}])


def test_a_call_id_of_another_shape_names_no_call_and_is_no_500() -> None:
    """Found by mutating valid requests: a list as a call's id made an unhashable set member."""
    with pytest.raises(InvalidRequestError):
        check_call_outputs([], [{"type": "function_call", "call_id": ["a"], "name": "f", "arguments": "{}"}, output(["a"])])  # type: ignore[arg-type]
