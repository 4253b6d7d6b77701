"""The plain shape's short way (`providers/messages/plain.py`) takes only requests the general
check accepts, and builds for them exactly what the general translation builds."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from contract.errors import APIError
from providers.messages.checks import check_request
from providers.messages.plain import plain_chat_body
from providers.messages.request import chat_body

HI = [{"role": "user", "content": "Hi"}]
CHAT = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "And?"}]


def request(**fields: Any) -> dict[str, Any]:
    return {"model": "claude-sonnet", "max_tokens": 1024, "messages": HI, **fields}


PLAIN = [
    request(),
    request(messages=CHAT),
    request(messages=[{"role": "assistant", "content": "Prefilled"}]),  # a first assistant turn, let through as Anthropic does
    request(messages=[{"role": "user", "content": ""}]),  # an empty string, let through as Anthropic does
    request(stream=True), request(stream=False),
    request(system="Be brief."), request(system=""),
    request(temperature=0), request(temperature=0.7), request(temperature=1), request(top_p=0.9), request(top_k=0), request(top_k=40),
    request(stop_sequences=["END", "STOP"]), request(stop_sequences=[]),
    request(metadata={"user_id": "user-7"}), request(metadata={"user_id": None}), request(metadata={}),
    request(messages=CHAT, system="You are terse.", temperature=0.2, top_p=1, top_k=5, stop_sequences=["\n\n"],
            metadata={"user_id": "u"}, stream=True),
]

NOT_PLAIN = [
    # Accepted by the general path, which translates them its own way.
    request(messages=[{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]),  # merged into one turn
    request(messages=[{"role": "user", "content": [{"type": "text", "text": "Hi"}]}]),
    request(messages=[{"role": "system", "content": "Be brief."}, *HI]),
    request(system=[{"type": "text", "text": "Be brief."}]),
    request(tools=[{"name": "f", "input_schema": {"type": "object"}}]),
    request(thinking={"type": "adaptive"}),
    request(service_tier="auto"),
    request(temperature=float("nan")),
    # Refused by the general path, which words the refusal.
    {"max_tokens": 10, "messages": HI}, {"model": "m", "messages": HI}, {"model": "m", "max_tokens": 10},
    request(model=5), request(max_tokens=0), request(max_tokens=True), request(max_tokens="9"), request(max_tokens=1.5),
    request(messages=[]), request(messages="Hi"), request(messages=["Hi"]),
    request(messages=[{"role": "user"}]), request(messages=[{"content": "Hi"}]), request(messages=[{"role": "bot", "content": "Hi"}]),
    request(messages=[{"role": "user", "content": "Hi", "name": "x"}]), request(messages=[{"role": "user", "content": None}]),
    request(stream="yes"), request(stream=None), request(system="   "), request(system=None), request(system=5),
    request(temperature=1.5), request(temperature=-0.1), request(temperature=None), request(temperature=True), request(top_p="1"),
    request(top_k=-1), request(top_k=2.0), request(top_k=False),
    request(stop_sequences="END"), request(stop_sequences=[1]), request(stop_sequences=None),
    request(metadata={"user_id": 5}), request(metadata={"user": "u"}), request(metadata=None), request(metadata="u"),
    request(temprature=0.5),
]


def general(body: dict[str, Any], stream: bool) -> dict[str, Any]:
    check_request(body)
    return chat_body(body, body["model"], stream=stream)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("body", PLAIN)
def test_a_plain_request_becomes_what_the_general_path_makes_of_it(body: dict[str, Any], stream: bool) -> None:
    assert plain_chat_body(body, stream=stream) == general(body, stream)


@pytest.mark.parametrize("body", NOT_PLAIN)
def test_anything_else_goes_the_general_way(body: dict[str, Any]) -> None:
    assert plain_chat_body(body, stream=False) is None


def test_no_mixture_of_fields_is_taken_that_the_general_check_refuses() -> None:
    """Every pair of fields drawn from both tables (a plain value next to a wrong one, two wrong
    ones): whatever the short way takes, the general check accepts and translates the same."""
    fields = [(name, value) for body in PLAIN + NOT_PLAIN for name, value in body.items() if name != "model"]
    taken = 0
    for (first, one), (second, other) in itertools.combinations(fields, 2):
        body = {"model": "m", "max_tokens": 16, "messages": HI, first: one, second: other}
        chat = plain_chat_body(body, stream=False)
        if chat is None:
            continue
        taken += 1
        try:
            expected = general(body, stream=False)
        except APIError as error:
            pytest.fail(f"the short way took {body}, which the general check refuses: {error.message}")
        assert chat == expected, body
    assert taken > 100  # the mixtures include many plain ones, so the comparison above ran
