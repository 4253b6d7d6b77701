"""The OpenAPI document as the server behaves (runtime/app/openapi.py): a body a route declares
replaces the schema FastAPI makes of the route's body model."""

from __future__ import annotations

from fastapi import FastAPI
from pydantic import BaseModel

from runtime.apis.common import json_body
from runtime.app.openapi import amend


class Thing(BaseModel):
    name: str | None = None
    part: Part | None = None


class Part(BaseModel):
    size: int


Thing.model_rebuild()


def test_a_declared_body_replaces_the_one_fastapi_makes_of_the_model() -> None:
    app = FastAPI()

    @app.post("/v1/things", openapi_extra=json_body(["name"], {"name": {"type": "string", "minLength": 1}}, more=False))
    async def create(thing: Thing) -> None: ...

    @app.post("/v1/parts")
    async def add(part: Part) -> None: ...

    generated = app.openapi()
    assert generated["paths"]["/v1/things"]["post"]["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith("/Thing")
    document = amend(generated, auth=False, quotas=False, open_paths=frozenset(), list_limits={})
    schema = document["paths"]["/v1/things"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert schema == {"type": "object", "required": ["name"], "properties": {"name": {"type": "string", "minLength": 1}},
                      "additionalProperties": False}
    # Thing is no longer referred to; Part still is, by the route that takes it.
    assert set(document["components"]["schemas"]) == {"Part", "Error"}
