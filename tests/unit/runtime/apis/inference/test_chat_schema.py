"""The chat completions body in the OpenAPI document (runtime/apis/inference/chat_schema.py) says
what the route checks before it looks the model up (`check_chat_body`, then a model named): every
body made from the schema is refused exactly when the schema declares it invalid."""

from __future__ import annotations

from typing import Any

from jsonschema import Draft202012Validator

from contract.errors import InvalidRequestError
from runtime.apis.inference.bodies import CHAT_BODY, check_chat_body
from support.schema_instances import candidates

SCHEMA: dict[str, Any] = CHAT_BODY["requestBody"]["content"]["application/json"]["schema"]


def _taken(body: dict[str, Any]) -> bool:
    try:
        check_chat_body(body)
    except InvalidRequestError:
        return False
    return isinstance(body.get("model"), str) and bool(body["model"])  # the router's check (catalog.resolve)


def test_a_chat_body_is_refused_exactly_when_its_schema_refuses_it() -> None:
    validator = Draft202012Validator(SCHEMA)
    made = candidates(SCHEMA, {"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    wrong = [body for body in made if validator.is_valid(body) != _taken(body)]
    assert not wrong, wrong[:5]
    assert sum(map(validator.is_valid, made)) > 100 and sum(not validator.is_valid(body) for body in made) > 100


def test_a_tool_message_needs_its_call_id_whatever_its_content() -> None:
    for content in ("done", [{"type": "text", "text": "done"}]):
        for call_id in (None, 7):
            message = {"role": "tool", "content": content, **({"tool_call_id": call_id} if call_id is not None else {})}
            assert not _taken({"model": "m", "messages": [message]}), message
        assert _taken({"model": "m", "messages": [{"role": "tool", "content": content, "tool_call_id": "call_1"}]})
