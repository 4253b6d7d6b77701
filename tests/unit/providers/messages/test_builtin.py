"""The built-in provider's thinking signature: the thinking sealed with the server's key, so that a
block handed back as `redacted_thinking` reads as the same thinking, and a forged one is refused."""

from __future__ import annotations

import os

import pytest

from contract.errors import InvalidRequestError
from providers.messages.builtin import BuiltinMessages
from providers.responses.sealing import ReasoningSeal


def provider() -> BuiltinMessages:
    key = os.urandom(32)
    return BuiltinMessages(inference=None, files=None, seal=ReasoningSeal(lambda: key))  # type: ignore[arg-type]


def test_a_signature_holds_the_thinking_it_signs() -> None:
    messages = provider()
    signature = messages._sign("The user wants Paris.")
    assert signature and "Paris" not in signature
    assert messages._reveal(signature) == "The user wants Paris."


def test_a_signature_of_another_server_is_refused() -> None:
    with pytest.raises(InvalidRequestError) as refused:
        provider()._reveal(provider()._sign("x"))
    assert refused.value.param == "redacted_thinking.data"
