"""Checks of a Responses request that need no server: `input` missing, empty or over OpenAI's size limit."""

from __future__ import annotations

import pytest

from contract.checks import MAX_STRING
from contract.responses.models import CreateResponse
from contract.errors import InvalidRequestError


def test_an_input_longer_than_openais_limit_is_a_400_naming_it() -> None:
    with pytest.raises(InvalidRequestError) as refused:
        CreateResponse(model="m", input="x" * (MAX_STRING + 1)).check()
    assert (refused.value.param, refused.value.code) == ("input", "string_above_max_length")
    CreateResponse(model="m", input="x" * MAX_STRING).check()


def test_a_request_without_input_is_missing_it_not_an_empty_array() -> None:
    # OpenAI: "Missing required parameter: 'input'." (issue 44); this said "empty array", which the client never sent.
    with pytest.raises(InvalidRequestError) as refused:
        CreateResponse.model_validate({"model": "m"}).check()
    assert (refused.value.message, refused.value.param, refused.value.code) == (
        "Missing required parameter: 'input'.", "input", "missing_required_parameter")


def test_an_explicitly_empty_input_is_still_an_empty_array() -> None:
    with pytest.raises(InvalidRequestError) as refused:
        CreateResponse.model_validate({"model": "m", "input": []}).check()
    assert (refused.value.param, refused.value.code) == ("input", "empty_array")


@pytest.mark.parametrize("instead", [{"previous_response_id": "resp_123"}, {"conversation": "conv_123"},
                                     {"prompt": {"id": "pmpt_123"}}], ids=["previous_response_id", "conversation", "prompt"])
def test_input_may_be_left_out_when_something_stands_for_it(instead: dict[str, object]) -> None:
    CreateResponse.model_validate({"model": "m", **instead}).check()  # a stored prompt, a chain or a conversation: as at OpenAI


def test_every_field_openais_sdk_may_send_is_known() -> None:
    """A create-response field of the openai SDK is never an `unknown_parameter` (issue 45): the
    SDK's own list of them, read from its types."""
    from openai.types.responses.response_create_params import ResponseCreateParamsBase

    from contract.responses.models import RESPONSE_FIELDS

    assert set(ResponseCreateParamsBase.__annotations__) - RESPONSE_FIELDS == set()


def test_a_field_nobody_defines_is_unknown_and_ignored_ones_pass() -> None:
    with pytest.raises(InvalidRequestError) as refused:
        CreateResponse.model_validate({"model": "m", "input": "x", "prompt_cache_retention": "24h", "max_tokens": 5}).check()
    assert (refused.value.message, refused.value.param, refused.value.code) == (
        "Unknown parameter: 'max_tokens'.", "max_tokens", "unknown_parameter")
    CreateResponse.model_validate({"model": "m", "input": "x", "prompt_cache_retention": "24h", "moderation": None}).check()
