"""Vector stores request bodies, checked as OpenAI checks them, into typed values.

Each `parse_*` takes the decoded JSON body and returns a frozen value or raises a 400 naming the
field. Filters are checked here, once, so a provider only translates well-formed ones.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from contract.checks import validate_metadata
from contract.errors import InvalidRequestError

__all__ = [
    "AUTO_CHUNKING",
    "Chunking",
    "CreateBatch",
    "CreateStore",
    "FileSpec",
    "Ranking",
    "Search",
    "UpdateStore",
    "check_filter",
    "check_unknown",
    "parse_attributes",
    "parse_chunking",
    "parse_create_batch",
    "parse_create_store",
    "parse_file_spec",
    "parse_max_results",
    "parse_ranking",
    "parse_search",
    "parse_update_store",
]

MAX_ATTRIBUTES = 16
MAX_ATTRIBUTE_KEY = 64
MAX_ATTRIBUTE_VALUE = 512
MAX_FILES_PER_CALL = 500  # OpenAI's limit on file_ids in one create or batch call
MAX_RESULTS = 50
COMPARISONS = frozenset({"eq", "ne", "gt", "gte", "lt", "lte", "in", "nin"})
COMPOUNDS = frozenset({"and", "or"})
MAX_FILTER_DEPTH = 8


@dataclass(frozen=True)
class Chunking:
    """How a file is cut: chunks of at most `max_tokens`, each sharing `overlap_tokens` with the last."""

    max_tokens: int = 800
    overlap_tokens: int = 400

    def public(self) -> dict[str, Any]:
        return {"type": "static", "static": {"max_chunk_size_tokens": self.max_tokens, "chunk_overlap_tokens": self.overlap_tokens}}


AUTO_CHUNKING = Chunking()
"""OpenAI's `auto` strategy: 800-token chunks overlapping by 400."""


@dataclass(frozen=True)
class FileSpec:
    file_id: str
    attributes: dict[str, str | float | bool] | None = None
    chunking: Chunking = AUTO_CHUNKING


@dataclass(frozen=True)
class CreateStore:
    name: str | None
    files: tuple[FileSpec, ...]
    expires_after_days: int | None
    metadata: dict[str, str] | None
    description: str | None
    embedding_model: str | None = None
    """The model that embeds the store's chunks (OGX's extension); else the provider's default."""
    embedding_dimension: int | None = None


@dataclass(frozen=True)
class UpdateStore:
    """Only the fields the request names change (`expires_after: null` removes the expiry)."""

    fields: Mapping[str, Any]


@dataclass(frozen=True)
class CreateBatch:
    files: tuple[FileSpec, ...]


@dataclass(frozen=True)
class Ranking:
    score_threshold: float = 0.0
    embedding_weight: float | None = None
    text_weight: float | None = None
    ranker: str = "auto"


@dataclass(frozen=True)
class Search:
    queries: tuple[str, ...]
    filters: Mapping[str, Any] | None = None
    max_num_results: int = 10
    ranking: Ranking = field(default_factory=Ranking)
    rewrite_query: bool = False
    mode: str | None = None
    """OGX's `search_mode`: keyword, vector or hybrid; by default hybrid where a store has embeddings, keyword where it has none."""


def _invalid(message: str, param: str, code: str = "invalid_value") -> InvalidRequestError:
    return InvalidRequestError(message, param=param, code=code)


def check_unknown(body: Mapping[str, Any], known: frozenset[str], where: str = "") -> None:
    """An unknown field is a 400, as OpenAI answers it (a typo must not pass silently)."""
    for key in body:
        if key not in known:
            raise _invalid(f"Unrecognized request argument supplied: {where}{key}", f"{where}{key}", "unknown_parameter")


def parse_chunking(value: Any, param: str = "chunking_strategy") -> Chunking:
    if value is None:
        return AUTO_CHUNKING
    if not isinstance(value, Mapping):
        raise _invalid(f"Invalid type for '{param}': expected an object.", param, "invalid_type")
    kind = value.get("type")
    if kind == "auto":
        check_unknown(value, frozenset({"type"}), f"{param}.")
        return AUTO_CHUNKING
    if kind != "static":
        raise _invalid(f"Invalid value for '{param}.type': expected 'auto' or 'static'.", f"{param}.type")
    check_unknown(value, frozenset({"type", "static"}), f"{param}.")
    static = value.get("static")
    if not isinstance(static, Mapping):
        raise _invalid(f"Missing required parameter: '{param}.static'.", f"{param}.static", "missing_required_parameter")
    size, overlap = static.get("max_chunk_size_tokens"), static.get("chunk_overlap_tokens")
    if not _is_int(size) or not 100 <= size <= 4096:
        raise _invalid(f"Invalid '{param}.static.max_chunk_size_tokens': expected an integer from 100 to 4096.",
                       f"{param}.static.max_chunk_size_tokens")
    if not _is_int(overlap) or not 0 <= overlap <= size // 2:
        raise _invalid(f"Invalid '{param}.static.chunk_overlap_tokens': expected an integer from 0 to half of max_chunk_size_tokens "
                       f"({size // 2}).", f"{param}.static.chunk_overlap_tokens")
    return Chunking(size, overlap)


def parse_attributes(value: Any, param: str = "attributes") -> dict[str, str | float | bool] | None:
    """OpenAI's rules: at most 16 keys of up to 64 characters; values strings (up to 512
    characters), numbers or booleans."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise _invalid(f"Invalid type for '{param}': expected an object.", param, "invalid_type")
    if len(value) > MAX_ATTRIBUTES:
        raise _invalid(f"Invalid '{param}': at most {MAX_ATTRIBUTES} keys are allowed, got {len(value)}.", param)
    for key, item in value.items():
        if not isinstance(key, str) or not key or len(key) > MAX_ATTRIBUTE_KEY:
            raise _invalid(f"Invalid '{param}': keys must be strings of 1 to {MAX_ATTRIBUTE_KEY} characters.", param)
        if isinstance(item, str):
            if len(item) > MAX_ATTRIBUTE_VALUE:
                raise _invalid(f"Invalid '{param}.{key}': strings are at most {MAX_ATTRIBUTE_VALUE} characters.", f"{param}.{key}")
        elif not isinstance(item, (bool, int, float)):
            raise _invalid(f"Invalid type for '{param}.{key}': expected a string, a number or a boolean.", f"{param}.{key}",
                           "invalid_type")
    return dict(value)


def parse_file_spec(value: Any, param: str, inherited: FileSpec | None = None) -> FileSpec:
    """A `{file_id, attributes, chunking_strategy}` body (`inherited` gives the defaults of a batch)."""
    if not isinstance(value, Mapping):
        raise _invalid(f"Invalid type for '{param}': expected an object.", param, "invalid_type")
    if param:
        check_unknown(value, frozenset({"file_id", "attributes", "chunking_strategy"}), f"{param}.")
    else:  # the body of an attach, where OGX's clients repeat the store's embedding model
        check_unknown(value, frozenset({"file_id", "attributes", "chunking_strategy"}) | OGX_EXTENSIONS)
        _embedding(value)
    file_id = value.get("file_id")
    where = f"{param}.file_id" if param else "file_id"
    if not isinstance(file_id, str) or not file_id:
        raise _invalid(f"Missing required parameter: '{where}'.", where, "missing_required_parameter")
    attributes = parse_attributes(value.get("attributes"), f"{param}.attributes" if param else "attributes")
    chunking = parse_chunking(value.get("chunking_strategy"), f"{param}.chunking_strategy" if param else "chunking_strategy") \
        if value.get("chunking_strategy") is not None else (inherited.chunking if inherited else AUTO_CHUNKING)
    if attributes is None and inherited is not None:
        attributes = inherited.attributes
    return FileSpec(file_id, attributes, chunking)


def _file_ids(value: Any, param: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(item, str) and item for item in value):
        raise _invalid(f"Invalid type for '{param}': expected an array of file ids.", param, "invalid_type")
    if len(value) > MAX_FILES_PER_CALL:
        raise _invalid(f"Invalid '{param}': at most {MAX_FILES_PER_CALL} files per call, got {len(value)}.", param)
    return list(dict.fromkeys(value))


def _expires_after(value: Any, param: str = "expires_after") -> int | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise _invalid(f"Invalid type for '{param}': expected an object.", param, "invalid_type")
    check_unknown(value, frozenset({"anchor", "days"}), f"{param}.")
    if value.get("anchor") != "last_active_at":
        raise _invalid(f"Invalid value for '{param}.anchor': expected 'last_active_at'.", f"{param}.anchor")
    days = value.get("days")
    if not _is_int(days) or not 1 <= days <= 365:
        raise _invalid(f"Invalid '{param}.days': expected an integer from 1 to 365.", f"{param}.days")
    return int(days)


def _optional_str(body: Mapping[str, Any], key: str, limit: int) -> str | None:
    value = body.get(key)
    if value is not None and (not isinstance(value, str) or len(value) > limit):
        raise _invalid(f"Invalid '{key}': expected a string of at most {limit} characters.", key)
    return value


OGX_EXTENSIONS = frozenset({"embedding_model", "embedding_dimension", "provider_id"})
"""Fields OGX's clients and conformance suite send (in `extra_body`): on a store's creation, the model that embeds its
chunks and the size of its vectors (an integer, or its decimal string as OGX's client sends it: "384"). `provider_id`
is accepted and unused (one vector stores provider serves the stack), and so are all three on a file's attach or a
batch, where OGX's clients repeat them: a store embeds every file with its own model."""


def _embedding(body: Mapping[str, Any]) -> tuple[str | None, int | None]:
    model, dimension = body.get("embedding_model"), body.get("embedding_dimension")
    if model is not None and (not isinstance(model, str) or not model.strip()):
        raise _invalid("Invalid 'embedding_model': expected a model id.", "embedding_model", "invalid_type")
    if isinstance(dimension, str) and re.fullmatch("[0-9]{1,9}", dimension):  # a plain decimal: no sign, space, point or exponent
        dimension = int(dimension)
    if dimension is not None and (not _is_int(dimension) or not 1 <= dimension <= 16_000):
        raise _invalid("Invalid 'embedding_dimension': expected an integer from 1 to 16000.", "embedding_dimension")
    return model, dimension


def parse_create_store(body: Mapping[str, Any]) -> CreateStore:
    check_unknown(body, frozenset({"name", "file_ids", "chunking_strategy", "expires_after", "metadata", "description"}) | OGX_EXTENSIONS)
    chunking = parse_chunking(body.get("chunking_strategy"))
    files = tuple(FileSpec(file_id, None, chunking) for file_id in _file_ids(body.get("file_ids"), "file_ids"))
    if body.get("chunking_strategy") is not None and not files:
        raise _invalid("Invalid 'chunking_strategy': it is only used with 'file_ids'.", "chunking_strategy")
    return CreateStore(_optional_str(body, "name", 256), files, _expires_after(body.get("expires_after")),
                       validate_metadata(body.get("metadata")), _optional_str(body, "description", 512), *_embedding(body))


def parse_update_store(body: Mapping[str, Any]) -> UpdateStore:
    check_unknown(body, frozenset({"name", "expires_after", "metadata"}))
    fields: dict[str, Any] = {}
    if "name" in body:
        fields["name"] = _optional_str(body, "name", 256)
    if "expires_after" in body:
        fields["expires_after_days"] = _expires_after(body["expires_after"])
    if "metadata" in body:
        fields["metadata"] = validate_metadata(body["metadata"])
    return UpdateStore(fields)


def parse_create_batch(body: Mapping[str, Any]) -> CreateBatch:
    check_unknown(body, frozenset({"file_ids", "files", "attributes", "chunking_strategy"}) | OGX_EXTENSIONS)
    _embedding(body)
    if body.get("file_ids") is not None and body.get("files") is not None:
        raise _invalid("Give either 'file_ids' or 'files', not both.", "files")
    defaults = FileSpec("", parse_attributes(body.get("attributes")), parse_chunking(body.get("chunking_strategy")))
    if body.get("files") is not None:
        entries = body["files"]
        if not isinstance(entries, list) or not entries or len(entries) > MAX_FILES_PER_CALL:
            raise _invalid(f"Invalid 'files': expected an array of 1 to {MAX_FILES_PER_CALL} objects.", "files")
        files = tuple(parse_file_spec(entry, f"files[{index}]", defaults) for index, entry in enumerate(entries))
    else:
        ids = _file_ids(body.get("file_ids"), "file_ids")
        if not ids:
            raise _invalid("Missing required parameter: 'file_ids' (or 'files').", "file_ids", "missing_required_parameter")
        files = tuple(FileSpec(file_id, defaults.attributes, defaults.chunking) for file_id in ids)
    return CreateBatch(files)


def parse_ranking(value: Any, param: str = "ranking_options") -> Ranking:
    if value is None:
        return Ranking()
    if not isinstance(value, Mapping):
        raise _invalid(f"Invalid type for '{param}': expected an object.", param, "invalid_type")
    check_unknown(value, frozenset({"ranker", "score_threshold", "hybrid_search"}), f"{param}.")
    ranker = value.get("ranker", "auto")
    if ranker not in ("auto", "default-2024-11-15", "default_2024_08_21", "none"):
        raise _invalid(f"Invalid value for '{param}.ranker': expected 'auto', 'default-2024-11-15' or 'none'.", f"{param}.ranker")
    threshold = value.get("score_threshold", 0.0)
    if not _is_number(threshold) or not 0 <= threshold <= 1:
        raise _invalid(f"Invalid '{param}.score_threshold': expected a number from 0 to 1.", f"{param}.score_threshold")
    hybrid = value.get("hybrid_search")
    embedding_weight = text_weight = None
    if hybrid is not None:
        if not isinstance(hybrid, Mapping):
            raise _invalid(f"Invalid type for '{param}.hybrid_search': expected an object.", f"{param}.hybrid_search", "invalid_type")
        check_unknown(hybrid, frozenset({"embedding_weight", "text_weight"}), f"{param}.hybrid_search.")
        for key in ("embedding_weight", "text_weight"):
            weight = hybrid.get(key)
            if not _is_number(weight) or weight < 0:
                raise _invalid(f"Invalid '{param}.hybrid_search.{key}': expected a number of at least 0.",
                               f"{param}.hybrid_search.{key}")
        embedding_weight, text_weight = float(hybrid["embedding_weight"]), float(hybrid["text_weight"])
        if embedding_weight + text_weight == 0:
            raise _invalid(f"Invalid '{param}.hybrid_search': the weights cannot both be 0.", f"{param}.hybrid_search")
    return Ranking(float(threshold), embedding_weight, text_weight, str(ranker))


def parse_max_results(value: Any, param: str = "max_num_results") -> int:
    if value is None:
        return 10
    if not _is_int(value) or not 1 <= value <= MAX_RESULTS:
        raise _invalid(f"Invalid '{param}': expected an integer from 1 to {MAX_RESULTS}.", param)
    return int(value)


SEARCH_MODES = ("keyword", "vector", "hybrid")
"""OGX's `search_mode` extension (see Search.mode)."""


def parse_search(body: Mapping[str, Any]) -> Search:
    check_unknown(body, frozenset({"query", "filters", "max_num_results", "ranking_options", "rewrite_query", "search_mode"}))
    if body.get("search_mode") is not None and body["search_mode"] not in SEARCH_MODES:
        raise _invalid(f"Invalid value for 'search_mode': expected one of {', '.join(SEARCH_MODES)}.", "search_mode")
    query = body.get("query")
    queries = [query] if isinstance(query, str) else query
    if not isinstance(queries, list) or not queries or not all(isinstance(item, str) and item.strip() for item in queries):
        raise _invalid("Invalid 'query': expected a non-empty string or an array of them.", "query",
                       "missing_required_parameter" if query is None else "invalid_value")
    rewrite = body.get("rewrite_query", False)
    if not isinstance(rewrite, bool):
        raise _invalid("Invalid type for 'rewrite_query': expected a boolean.", "rewrite_query", "invalid_type")
    if rewrite:
        queries = [rewritten(item) for item in queries]
    return Search(tuple(queries), check_filter(body.get("filters")), parse_max_results(body.get("max_num_results")),
                  parse_ranking(body.get("ranking_options")), rewrite, body.get("search_mode"))


_WORD = re.compile(r"[\w][\w'-]*", re.UNICODE)
_FRAMING = frozenset("""a an the is are was were be been being am do does did done doing what which who whom whose when where why
how i me my mine we us our you your it its they them their he she his her of in on at to for from by with about as into onto
and or but if so than then that this these those there here can could would should will shall may might must please tell
know knew like want wants need needs find show give get any some all much many very just also""".split())


def rewritten(query: str) -> str:
    """`rewrite_query`: the query as a search wants it, the question's framing and its stop
    words dropped ("What does the keeper do in fog?" is searched as "keeper fog"). A query of
    nothing but such words is kept as it is."""
    kept = [word for word in _WORD.findall(query) if word.lower() not in _FRAMING]
    return " ".join(kept) if kept else query.strip()


def check_filter(value: Any, param: str = "filters", depth: int = 0) -> Mapping[str, Any] | None:
    """A comparison (`{type: eq|ne|gt|gte|lt|lte|in|nin, key, value}`) or a compound
    (`{type: and|or, filters: [...]}`) filter, as OpenAI defines them."""
    if value is None and depth == 0:
        return None
    if not isinstance(value, Mapping):
        raise _invalid(f"Invalid type for '{param}': expected a filter object.", param, "invalid_type")
    if depth > MAX_FILTER_DEPTH:
        raise _invalid(f"Invalid '{param}': filters nest at most {MAX_FILTER_DEPTH} deep.", param)
    kind = value.get("type")
    if kind in COMPOUNDS:
        check_unknown(value, frozenset({"type", "filters"}), f"{param}.")
        filters = value.get("filters")
        if not isinstance(filters, list) or not filters:
            raise _invalid(f"Invalid '{param}.filters': expected a non-empty array of filters.", f"{param}.filters")
        for index, inner in enumerate(filters):
            check_filter(inner, f"{param}.filters[{index}]", depth + 1)
        return value
    if kind not in COMPARISONS:
        raise _invalid(f"Invalid value for '{param}.type': expected one of {', '.join(sorted(COMPARISONS | COMPOUNDS))}.", f"{param}.type")
    check_unknown(value, frozenset({"type", "key", "value"}), f"{param}.")
    if not isinstance(value.get("key"), str) or not value["key"]:
        raise _invalid(f"Missing required parameter: '{param}.key'.", f"{param}.key", "missing_required_parameter")
    operand = value.get("value")
    if kind in ("in", "nin"):
        if not isinstance(operand, list) or not operand or not all(_scalar(item) for item in operand):
            raise _invalid(f"Invalid '{param}.value': '{kind}' takes a non-empty array of strings or numbers.", f"{param}.value")
    elif not _scalar(operand) and not isinstance(operand, bool):
        raise _invalid(f"Invalid type for '{param}.value': expected a string, a number or a boolean.", f"{param}.value", "invalid_type")
    elif kind in ("gt", "gte", "lt", "lte") and not _is_number(operand):
        raise _invalid(f"Invalid '{param}.value': '{kind}' compares numbers.", f"{param}.value")
    return value


def _scalar(value: Any) -> bool:
    return isinstance(value, str) or _is_number(value)


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)

