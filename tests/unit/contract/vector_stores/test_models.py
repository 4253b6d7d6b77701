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
                                             ({"embedding_dimension": 64.0}, "embedding_dimension"),
                                             ({"embedding_dimension": True}, "embedding_dimension")])
def test_a_malformed_embedding_model_or_size_is_a_400_naming_it(body: dict[str, object], param: str) -> None:
    with pytest.raises(InvalidRequestError) as refused:
        parse_create_store(body)
    assert refused.value.param == param


@pytest.mark.parametrize(("sent", "kept"), [("384", 384), ("1", 1), ("16000", 16_000), ("0064", 64)])
def test_a_size_sent_as_a_decimal_string_is_taken_as_its_integer(sent: str, kept: int) -> None:
    # OGX's client and its tests send embedding_dimension as a string.
    store = parse_create_store({"embedding_model": "m", "embedding_dimension": sent})
    assert store.embedding_dimension == kept and isinstance(store.embedding_dimension, int)


@pytest.mark.parametrize("sent", ["0", "16001", "3.5", "1e3", " 384", "384 ", "384\n", "-1", "+384", "", "٣٨٤", "0x10", "1_000",
                                  "9" * 5000])
def test_a_size_string_that_is_no_plain_decimal_in_range_is_the_same_400(sent: str) -> None:
    with pytest.raises(InvalidRequestError) as refused:
        parse_create_store({"embedding_model": "m", "embedding_dimension": sent})
    assert (refused.value.param, refused.value.message) == ("embedding_dimension",
                                                            "Invalid 'embedding_dimension': expected an integer from 1 to 16000.")
