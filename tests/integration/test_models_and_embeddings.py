"""GET /v1/models and POST /v1/embeddings through the openai SDK."""

from __future__ import annotations

import openai
import pytest


def test_models_are_listed_with_provider_prefixed_ids(openai_client: openai.OpenAI) -> None:
    ids = [model.id for model in openai_client.models.list()]
    assert {"fake/fake-model", "fake/fake-embed", "fake/fake-reasoner"} <= set(ids)
    assert all(model.object == "model" for model in openai_client.models.list())


def test_each_model_carries_its_type_and_provider_as_ogx_lists_them(openai_client: openai.OpenAI) -> None:
    models = {model.id: model for model in openai_client.models.list()}
    assert models["fake/fake-model"].custom_metadata == {  # type: ignore[attr-defined]
        "model_type": "llm", "provider_id": "fake", "provider_resource_id": "fake-model"}
    embed = openai_client.models.retrieve("fake-embed").custom_metadata  # type: ignore[attr-defined]
    assert embed["model_type"] == "embedding" and embed["provider_resource_id"] == "fake-embed"


def test_a_model_is_retrieved_by_prefixed_or_bare_id(openai_client: openai.OpenAI) -> None:
    assert openai_client.models.retrieve("fake/fake-model").id == "fake/fake-model"
    assert openai_client.models.retrieve("fake-model").id == "fake/fake-model"


def test_an_unknown_model_is_a_404(openai_client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as error:
        openai_client.models.retrieve("nope")
    assert error.value.code == "model_not_found"


def test_embeddings_with_the_sdk_default_base64_encoding(openai_client: openai.OpenAI, embedding_model: str) -> None:
    result = openai_client.embeddings.create(model=embedding_model, input=["alpha", "beta"])
    assert [item.index for item in result.data] == [0, 1]
    assert len(result.data[0].embedding) == 8
    assert result.data[0].embedding != result.data[1].embedding
    floats = openai_client.embeddings.create(model=embedding_model, input=["alpha", "beta"], encoding_format="float")
    assert floats.data[0].embedding == pytest.approx(result.data[0].embedding, rel=1e-6)


def test_embedding_dimensions_pass_through(openai_client: openai.OpenAI, embedding_model: str) -> None:
    result = openai_client.embeddings.create(model=embedding_model, input="alpha", dimensions=4, encoding_format="float")
    assert len(result.data[0].embedding) == 4


@pytest.mark.parametrize(("extra", "param", "message"), [
    ({"input": ""}, "input", "Invalid 'input': expected a non-empty string or a non-empty array."),
    ({"input": []}, "input", "Invalid 'input': expected a non-empty string or a non-empty array."),
    ({"input": ["alpha", ""]}, "input[1]", "Invalid 'input[1]': expected a non-empty string or array of tokens."),
    ({"input": [[1, 2], []]}, "input[1]", "Invalid 'input[1]': expected a non-empty string or array of tokens."),
    ({"input": "alpha", "encoding_format": "hex"}, "encoding_format", "Invalid value: 'hex'. Supported values are: 'float' and 'base64'."),
])
def test_what_openai_refuses_in_an_embeddings_request_is_a_400_before_the_model(openai_client: openai.OpenAI, embedding_model: str,
                                                                               extra: dict[str, object], param: str, message: str) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        openai_client.post("/embeddings", cast_to=object, body={"model": embedding_model, **extra})
    assert refused.value.body == {"message": message, "type": "invalid_request_error", "param": param, "code": "invalid_value"}


def test_health_reports_the_inference_provider_and_the_storage(openai_client: openai.OpenAI) -> None:
    health = openai_client.get("/health", cast_to=object)
    assert health == {"status": "ok", "providers": {"inference/fake": {"status": "ok", "detail": None, "models": 3}},
                      "storage": {"default": {"status": "ok", "dialect": "sqlite", "detail": None}}}


def test_answers_carry_the_model_id_the_client_asked_for(openai_client: openai.OpenAI) -> None:
    """`fake/fake-model` reaches the upstream as `fake-model`; the client sees the id it used
    (the one /v1/models lists), in plain, streamed and stored answers and in embeddings."""
    plain = openai_client.chat.completions.create(model="fake/fake-model", messages=[{"role": "user", "content": "which model"}], store=True)
    assert plain.model == "fake/fake-model"
    stored = openai_client.chat.completions.list(model="fake/fake-model")
    assert plain.id in [completion.id for completion in stored]
    chunks = list(openai_client.chat.completions.create(model="fake/fake-model", messages=[{"role": "user", "content": "which model"}], stream=True))
    assert chunks and {chunk.model for chunk in chunks} == {"fake/fake-model"}
    for encoding in ("float", "base64"):
        embedded = openai_client.embeddings.create(model="fake/fake-embed", input="alpha", encoding_format=encoding)  # type: ignore[arg-type]
        assert embedded.model == "fake/fake-embed"
    bare = openai_client.chat.completions.create(model="fake-model", messages=[{"role": "user", "content": "which model"}])
    assert bare.model == "fake-model"  # not renamed: the upstream's answer, byte for byte
