"""Checks of a Responses request that need no server: OpenAI's size limit on `input`."""

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
