"""The OpenAPI document is true (issue 13, item 10): every error a route answers is one it lists,
in the error schema, and the ids, limits and enums it enforces are in the document. A small
fuzzer walks the document: each operation is called with values the document rules out and with
unknown objects, and each answer's status must be one the document lists for it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx2
import pytest

from fake_upstream.server import running_fake_upstream
from support.live_stack import run_yaml, served

PROVIDERS = """  conversations: [{provider_id: builtin, provider_type: builtin}]
  files: [{provider_id: local, provider_type: local}]
  vector_stores: [{provider_id: builtin, provider_type: builtin}]
  prompts: [{provider_id: builtin, provider_type: builtin}]
"""
AUTH = """server:
  auth:
    api_keys: [{principal: alice, key: sk-alice-0123456789}]
    quotas: {requests_per_minute: 100000}
"""


@pytest.fixture(scope="module", params=["server", "library"])
def http(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx2.Client]:
    with running_fake_upstream() as upstream:
        path = run_yaml(tmp_path_factory.mktemp("openapi"), upstream.base_url, name="openapi", providers=PROVIDERS + AUTH)
        with served(request.param, path) as client:
            # The SDK's own HTTP client (the library client's runs the app in process): any route, any body.
            http: httpx2.Client = client._client  # type: ignore[attr-defined]
            http.headers["authorization"] = "Bearer sk-alice-0123456789"
            yield http


def document(http: httpx2.Client) -> dict[str, Any]:
    answer = http.get(str(http.base_url).removesuffix("/v1/") + "/openapi.json")
    assert answer.status_code == 200
    return dict(answer.json())


def operations(doc: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, methods in doc["paths"].items():
        for method, operation in methods.items():
            yield path, method, operation


def test_every_operation_lists_its_errors_in_the_error_schema(http: httpx2.Client) -> None:
    doc = document(http)
    assert "Error" in doc["components"]["schemas"] and "HTTPValidationError" not in doc["components"]["schemas"]
    for path, method, operation in operations(doc):
        responses = operation["responses"]
        assert "422" not in responses, (method, path)  # every mistake is a 400 here, as at OpenAI
        assert {"500", "503"} <= responses.keys(), (method, path)
        if operation.get("parameters") or operation.get("requestBody"):
            assert "400" in responses, (method, path)
        if path.startswith("/v1/") and path not in ("/v1/health", "/v1/version"):
            assert {"401", "429"} <= responses.keys(), (method, path)  # auth and quotas are on here
        for status, answer in responses.items():
            if status.startswith(("4", "5")):
                assert answer["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/Error"}


def test_enforced_ids_limits_and_enums_are_in_the_document(http: httpx2.Client) -> None:
    doc = document(http)
    parameters = {(path, method, parameter["name"]): parameter["schema"]
                  for path, method, operation in operations(doc) for parameter in operation.get("parameters", [])}
    assert parameters[("/v1/responses/{response_id}", "get", "response_id")]["pattern"] == "^resp_"
    assert parameters[("/v1/conversations/{conversation_id}", "get", "conversation_id")]["pattern"] == "^conv_"
    assert parameters[("/v1/vector_stores/{store_id}", "get", "store_id")]["pattern"] == "^vs_"
    assert (parameters[("/v1/responses", "get", "limit")]["minimum"], parameters[("/v1/responses", "get", "limit")]["maximum"]) == (1, 100)
    assert parameters[("/v1/chat/completions", "get", "limit")]["maximum"] == 1000
    assert parameters[("/v1/files", "get", "limit")]["maximum"] == 10_000
    assert parameters[("/v1/conversations/{conversation_id}/items", "get", "order")]["enum"] == ["asc", "desc"]
    bodies = {(path, method): operation.get("requestBody") for path, method, operation in operations(doc)}
    for route in [("/v1/conversations/{conversation_id}/items", "post"), ("/v1/vector_stores/{store_id}/search", "post"),
                  ("/v1/prompts", "post"), ("/v1/files", "post"), ("/v1/chat/completions", "post")]:
        assert bodies[route] is not None, route
    chat = bodies[("/v1/chat/completions", "post")]["content"]["application/json"]["schema"]
    assert chat["properties"]["temperature"]["maximum"] == 2 and chat["required"] == ["model", "messages"]
    # The Responses routes that also read a form say so, with the same schema; others do not.
    for route in [("/v1/responses", "post"), ("/v1/responses/compact", "post"), ("/v1/responses/input_tokens", "post")]:
        content = bodies[route]["content"]
        assert content["application/x-www-form-urlencoded"] == content["application/json"], route
    assert "application/x-www-form-urlencoded" not in bodies[("/v1/chat/completions", "post")]["content"]


def _fill(path: str, parameters: list[dict[str, Any]], wrong: bool) -> str:
    for parameter in parameters:
        if parameter.get("in") == "path":
            pattern = parameter["schema"].get("pattern")
            if wrong and pattern:
                value = "nope_0123"  # not the kind of id the route takes
            else:
                value = (pattern or "^x_").lstrip("^") + "doesnotexist0123"
            path = path.replace("{" + parameter["name"] + "}", value)
    return path


def test_a_walk_of_the_document_meets_only_statuses_it_lists(http: httpx2.Client) -> None:
    doc = document(http)
    base = str(http.base_url).removesuffix("/v1/")
    walked = 0
    for path, method, operation in operations(doc):
        if not path.startswith("/v1/") or "/openapi" in path or path == "/v1/responses" and method == "post":
            continue
        documented = operation["responses"].keys()
        parameters = operation.get("parameters", [])
        tries: list[tuple[str, dict[str, Any], Any]] = []
        has_path_ids = any(parameter.get("in") == "path" for parameter in parameters)
        if has_path_ids:
            tries.append((_fill(path, parameters, wrong=False), {}, {}))
            if any(parameter["schema"].get("pattern") for parameter in parameters if parameter.get("in") == "path"):
                tries.append((_fill(path, parameters, wrong=True), {}, {}))
        elif method == "get":
            tries.append((path, {}, None))
        if any(parameter["name"] == "limit" for parameter in parameters):
            tries.append((_fill(path, parameters, wrong=False) if has_path_ids else path, {"limit": 0}, None))
        if any(parameter["name"] == "order" for parameter in parameters):
            tries.append((_fill(path, parameters, wrong=False) if has_path_ids else path, {"order": "sideways"}, None))
        if operation.get("requestBody") and "application/json" in operation["requestBody"]["content"]:
            tries.append((_fill(path, parameters, wrong=False), {}, ["not", "an", "object"]))
        for url, query, body in tries:
            answer = http.request(method.upper(), base + url, params=query,
                                  **({"json": body} if body is not None else {}))
            walked += 1
            assert str(answer.status_code) in documented, (method, url, query, body, answer.status_code, answer.text[:200])
            if answer.status_code >= 400:
                assert set(answer.json()["error"]) >= {"message", "type", "param", "code"}
    assert walked > 60
    # Without credentials: a 401, which every guarded operation lists.
    anonymous = http.get(base + "/v1/models", headers={"authorization": ""})
    assert anonymous.status_code == 401 and "401" in doc["paths"]["/v1/models"]["get"]["responses"]
