"""The OpenAPI document's request bodies agree with the routes' checks (issue 45, item 6): for
each operation whose body the server checks beyond its types, bodies are made from the document
(tests/support/schema_instances.py: each field at each enum value, bound and branch, and past them)
and sent, and every body the document declares valid must not be a 400, every body it declares
invalid must be one. A check added to a route without its schema, or a schema stricter than the
route, fails here.

What the document cannot say, the stack is made to meet before a body is sent (`_as_the_stack_has`)
or the body is not sent (`_unservable`): the ids that name stored objects, the tool a tool choice
names, the call a tool output answers, a grammar that compiles, a token this server sealed, and the
tool types this stack serves (none server-side here).

Chat completions name a model no provider serves: the route checks the body before it looks the
model up, so a checked body is a 404, and nothing reaches the upstream. The Responses routes look
the model up before they check the input items, so they call the fake upstream's model.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
from jsonschema import Draft202012Validator

from contract.responses.models import RESPONSE_FIELDS
from fake_upstream.server import running_fake_upstream
from support.live_stack import run_yaml, served
from support.schema_instances import candidates, walk

PROVIDERS = """  conversations: [{provider_id: builtin, provider_type: builtin}]
  files: [{provider_id: local, provider_type: local}]
  prompts: [{provider_id: builtin, provider_type: builtin}]
"""
MODEL = "fake-model"
HELLO = [{"role": "user", "content": "hi"}]

BASES: dict[str, dict[str, Any]] = {
    "/v1/chat/completions": {"model": "no-such-provider/no-such-model", "messages": HELLO},
    "/v1/responses": {"model": MODEL, "input": "hi"},
    "/v1/responses/input_tokens": {"model": MODEL, "input": "hi"},
    "/v1/responses/compact": {"model": MODEL, "input": "hi"},
    "/v1/conversations": {},
    "/v1/conversations/{conversation_id}/items": {"items": HELLO},
}
"""A valid body of each operation, which the candidates vary."""

_CLIENT_TOOLS = {"function", "custom", "namespace", "tool_search", "apply_patch", "shell", "local_shell"}


@pytest.fixture(scope="module", params=["server", "library"])
def http(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx2.Client]:
    with running_fake_upstream() as upstream:
        path = run_yaml(tmp_path_factory.mktemp("bodies"), upstream.base_url, name="bodies", providers=PROVIDERS)
        with served(request.param, path) as client:
            yield client._client  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def stored(http: httpx2.Client) -> dict[str, str]:
    """Objects the bodies may name: a stored response, a conversation, a prompt declaring `x`."""
    response = http.post("responses", json={"model": MODEL, "input": "hi"})
    conversation = http.post("conversations", json={})
    prompt = http.post("prompts", json={"prompt": "Be brief.", "variables": ["x"]})
    assert (response.status_code, conversation.status_code, prompt.status_code) == (200, 200, 200), prompt.text
    return {"response": response.json()["id"], "conversation": conversation.json()["id"], "prompt": prompt.json()["prompt_id"]}


def body_schema(http: httpx2.Client, path: str) -> dict[str, Any]:
    document = http.get(str(http.base_url).removesuffix("/v1/") + "/openapi.json").json()
    schema: dict[str, Any] = document["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]
    return schema


def test_the_create_response_body_lists_every_field_the_server_takes(http: httpx2.Client) -> None:
    for path in ("/v1/responses", "/v1/responses/input_tokens"):
        schema = body_schema(http, path)
        assert set(schema["properties"]) == RESPONSE_FIELDS and schema["additionalProperties"] is False, path
        assert "$ref" not in schema  # the model's own schema, looser than its checks, is replaced
    document = http.get(str(http.base_url).removesuffix("/v1/") + "/openapi.json").json()
    assert "CreateResponse" not in document["components"]["schemas"]


@pytest.mark.parametrize("path", list(BASES))
def test_the_route_takes_what_its_document_allows_and_refuses_the_rest(http: httpx2.Client, stored: dict[str, str], path: str) -> None:
    schema = body_schema(http, path)
    validator = Draft202012Validator(schema)
    url = path.removeprefix("/v1/").replace("{conversation_id}", stored["conversation"])
    disagreements: list[str] = []
    counted = {True: 0, False: 0}
    for candidate in candidates(schema, BASES[path]):
        body = _as_the_stack_has(path, json.loads(json.dumps(candidate)), stored)
        valid = validator.is_valid(body)
        if valid and _unservable(body):
            continue
        answer = http.post(url, json=body)
        counted[valid] += 1
        if valid and answer.status_code == 400 or answer.status_code >= 500 and answer.status_code != 503:
            disagreements.append(f"valid, answered {answer.status_code}: {json.dumps(body)[:300]} -> {answer.text[:300]}")
        elif not valid and answer.status_code != 400:
            reason = next(validator.iter_errors(body)).message
            disagreements.append(f"invalid ({reason[:120]}), answered {answer.status_code}: {json.dumps(body)[:300]}")
    assert not disagreements, f"{len(disagreements)} of {sum(counted.values())}:\n" + "\n".join(disagreements)
    assert counted[True] >= 15 and counted[False] >= 10, counted


def _as_the_stack_has(path: str, body: dict[str, Any], stored: dict[str, str]) -> dict[str, Any]:
    """`body` with what the document cannot require made true of this stack: ids that name its
    objects, the tool a tool choice names among the tools, a call before each tool output, a
    grammar that compiles. Values the document refuses are left as they are."""
    if not path.startswith("/v1/responses"):
        return body
    if isinstance(body.get("previous_response_id"), str) and body["previous_response_id"].startswith("resp"):
        body["previous_response_id"] = stored["response"]
    conversation = body.get("conversation")
    if isinstance(conversation, str) and conversation.startswith("conv"):
        body["conversation"] = stored["conversation"]
    elif isinstance(conversation, dict) and str(conversation.get("id")).startswith("conv"):
        conversation["id"] = stored["conversation"]
    if isinstance(body.get("prompt"), dict) and isinstance(body["prompt"].get("id"), str) and body["prompt"]["id"]:
        body["prompt"]["id"] = stored["prompt"]
    if isinstance(body.get("input"), list):
        body["input"] = _with_calls(body["input"])
    choice = body.get("tool_choice")
    if isinstance(choice, dict) and choice.get("type") in _CLIENT_TOOLS and isinstance(body.get("tools", []), list):
        kind = choice["type"]
        tool = {"type": kind, "name": choice.get("name")} if kind in ("function", "custom") else {"type": kind, "execution": "client"}
        body["tools"] = [*(body.get("tools") or []), tool]
    for part in walk(body.get("tools")):
        if part.get("type") == "grammar" and part.get("syntax") == "lark" and part.get("definition") == "x":
            part["definition"] = 'start: "x"'
    return body


def _with_calls(items: list[Any]) -> list[Any]:
    """Each function or custom tool output after a call it answers (OpenAI refuses an answer to a
    call the model never made), and a message last when there is none (a model's server refuses
    a context with no message)."""
    calls = {"function_call_output": {"type": "function_call", "name": "f", "arguments": "{}"},
             "custom_tool_call_output": {"type": "custom_tool_call", "name": "f", "input": "x"}}
    made: list[Any] = []
    for item in items:
        if isinstance(item, dict) and item.get("type") in calls and isinstance(item.get("call_id"), str):
            made.append({**calls[item["type"]], "call_id": item["call_id"]})
        made.append(item)
    if not any(isinstance(item, dict) and "role" in item for item in items):
        made.append(HELLO[0])
    return made


def _unservable(body: dict[str, Any]) -> bool:
    """A valid body this stack cannot take: a server-side tool (it serves none), or a tool choice
    naming one, or encrypted content (only this server's sealed tokens are read back)."""
    tools = body.get("tools") if isinstance(body.get("tools"), list) else []
    choice = body.get("tool_choice")
    if any(tool.get("type") not in _CLIENT_TOOLS for tool in tools) or isinstance(choice, dict) and choice.get("type") not in (
            *_CLIENT_TOOLS, "allowed_tools"):
        return True
    return any(item.get("type") == "compaction" or item.get("encrypted_content") for item in walk(body.get("input")))
