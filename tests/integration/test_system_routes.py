"""The routes every stack serves, and the error shape, through the `openai` SDK in both modes."""

from typing import Any

import httpx2
import openai
import pytest


def test_health_answers_ok(openai_client: openai.OpenAI) -> None:
    health: Any = openai_client.get("/health", cast_to=object)
    assert health["status"] == "ok"


def test_version_is_the_package_version(openai_client: openai.OpenAI) -> None:
    from importlib.metadata import version

    assert openai_client.get("/version", cast_to=object) == {"version": version("stack")}


def test_routes_are_listed(openai_client: openai.OpenAI) -> None:
    body: Any = openai_client.get("/inspect/routes", cast_to=object)
    routes = {(route["route"], tuple(route["methods"])) for route in body["data"]}
    assert ("/v1/health", ("GET",)) in routes
    assert ("/v1/providers", ("GET",)) in routes
    assert ("/v1/inspect/routes", ("GET",)) in routes


def test_providers_lists_what_is_configured_with_secrets_redacted(openai_client: openai.OpenAI) -> None:
    body: Any = openai_client.get("/providers", cast_to=object)
    provider = next(p for p in body["data"] if p["api"] == "inference")
    assert (provider["api"], provider["provider_id"], provider["provider_type"], provider["status"]) == ("inference", "fake", "openai", "active")
    assert provider["config"]["api_key"] == "********"
    assert provider["config"]["timeout_s"] == 30


def test_every_response_carries_a_request_id(openai_client: openai.OpenAI) -> None:
    response = openai_client.get("/health", cast_to=httpx2.Response)
    assert response.headers["x-request-id"].startswith("req_")


def test_an_unknown_route_is_a_404_in_the_openai_error_shape(openai_client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as error:
        openai_client.get("/no/such/route", cast_to=object)
    assert error.value.status_code == 404
    assert error.value.body == {
        "message": "Unknown route: GET /v1/no/such/route",
        "type": "invalid_request_error",
        "param": None,
        "code": None,
    }
    assert error.value.request_id and error.value.request_id.startswith("req_")


@pytest.mark.parametrize(("method", "path", "hint"), [
    ("POST", "/chat/completions/", "POST /v1/chat/completions"),  # was a 307 to the route without the slash
    ("GET", "/models/", "GET /v1/models"),  # was a 400: the path parameter of /models/{model_id:path}, empty
    ("GET", "/models/fake-model/", "GET /v1/models/fake-model"),  # was a model named "fake-model/"
    ("GET", "/health/", "GET /v1/health"),  # a direct route
    ("GET", "/conversations/conv_x/items/", "GET /v1/conversations/conv_x/items"),  # a templated one
    ("DELETE", "/files/file-x/", "DELETE /v1/files/file-x"),  # one FastAPI answers
    ("POST", "/no/such/route/", None),
])
def test_a_trailing_slash_is_an_unknown_route_on_every_route(openai_client: openai.OpenAI, method: str, path: str,
                                                              hint: str | None) -> None:
    # As at OpenAI: no route ends in a slash, and one that does is a 404, never redirected (issue 44).
    response = openai_client._client.request(method, f"{openai_client.base_url}{path.lstrip('/')}", follow_redirects=False,
                                             json={"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]}
                                             if method == "POST" else None)
    assert response.status_code == 404, response.text
    error = response.json()["error"]
    assert (error["type"], error["param"], error["code"]) == ("invalid_request_error", None, None)
    assert error["message"].startswith(f"Unknown route: {method} /v1{path}")
    if hint is not None:
        assert f"did you mean {hint}?" in error["message"]


def test_a_wrong_method_is_a_405_in_the_openai_error_shape(openai_client: openai.OpenAI) -> None:
    with pytest.raises(openai.APIStatusError) as error:
        openai_client.post("/health", cast_to=object, body={})
    assert error.value.status_code == 405
    assert error.value.type == "invalid_request_error"
    assert "POST" in error.value.message


@pytest.mark.parametrize(("method", "path", "allowed"), [
    ("DELETE", "/chat/completions", "GET, POST"),  # two routes serve this path: both are named
    ("PATCH", "/files/file-x", "DELETE, GET"),
    ("PUT", "/conversations/conv_x/items", "GET, POST"),
])
def test_a_405_lists_every_method_the_path_serves(openai_client: openai.OpenAI, method: str, path: str, allowed: str) -> None:
    response = openai_client._client.request(method, f"{openai_client.base_url}{path.lstrip('/')}")
    assert response.status_code == 405 and response.headers["allow"] == allowed
    assert response.json()["error"]["message"].endswith(f"(allowed: {allowed})")


def test_a_body_over_the_size_limit_is_a_413(openai_client: openai.OpenAI) -> None:
    with pytest.raises(openai.APIStatusError) as error:
        openai_client.with_options(max_retries=0).post("/health", cast_to=object, body={"padding": "x" * 70_000})
    assert error.value.status_code == 413
    assert error.value.code == "request_too_large"
    assert "server.max_request_bytes" in error.value.message


async def test_the_async_client_reaches_the_same_app(async_openai_client: openai.AsyncOpenAI) -> None:
    health: Any = await async_openai_client.get("/health", cast_to=object)
    assert health["status"] == "ok"
