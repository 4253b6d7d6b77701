"""The checks and meanings of vector store request bodies that need no stack to state."""

from __future__ import annotations

import pytest

from contract.vector_stores.models import parse_create_store, parse_search, rewritten
from contract.errors import InvalidRequestError


@pytest.mark.parametrize(("query", "searched"), [
    ("What does the keeper do in fog?", "keeper fog"),
    ("I would like to know the height of the main office building.", "height main office building"),
    ("Where's the harbour master's office", "Where's harbour master's office"),
    ("what is it?", "what is it?"),  # nothing but framing: kept as asked
])
def test_rewrite_query_drops_the_questions_framing(query: str, searched: str) -> None:
    assert rewritten(query) == searched


def test_a_rewritten_search_searches_and_reports_the_rewritten_queries() -> None:
    search = parse_search({"query": ["What is the tide at noon?", "fog"], "rewrite_query": True})
    assert search.queries == ("tide noon", "fog") and search.rewrite_query
    assert parse_search({"query": "What is the tide at noon?"}).queries == ("What is the tide at noon?",)


def test_search_mode_is_kept_for_the_provider() -> None:
    assert parse_search({"query": "fog", "search_mode": "vector"}).mode == "vector"
    assert parse_search({"query": "fog"}).mode is None


def test_a_store_names_its_embedding_model_and_size() -> None:
    store = parse_create_store({"name": "x", "embedding_model": "m", "embedding_dimension": 64, "provider_id": "builtin"})
    assert (store.embedding_model, store.embedding_dimension) == ("m", 64)


@pytest.mark.parametrize(("body", "param"), [({"embedding_model": ""}, "embedding_model"), ({"embedding_model": 3}, "embedding_model"),
                                             ({"embedding_dimension": 0}, "embedding_dimension"),
                                             ({"embedding_dimension": "64"}, "embedding_dimension")])
def test_a_malformed_embedding_model_or_size_is_a_400_naming_it(body: dict[str, object], param: str) -> None:
    with pytest.raises(InvalidRequestError) as refused:
        parse_create_store(body)
    assert refused.value.param == param
