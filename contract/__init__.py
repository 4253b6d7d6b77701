"""The provider contract: what builder, runtime, the built-in providers and third-party plugins all
stand on, importable without the server (pydantic and the standard library; no FastAPI, uvicorn or
storage driver is imported).

A provider package imports from here only:

- `contract.spec`: `ProviderSpec` (what an entry point publishes), `ProviderContext` (what its
  factory receives), `Api` and the entry-point groups;
- `contract.<api>.protocol`: the `typing.Protocol` a provider of that API implements, and
  `contract.<api>.models` where the API has wire models of its own (responses, vector_stores);
- `contract.errors`: the errors that reach clients in OpenAI's shape, with their status;
- `contract.caller`: who is calling (the principal the runtime's authentication admitted), for a
  provider that keeps each caller's records apart;
- `contract.items`, `contract.checks`: Responses items, and the checks every API applies to ids,
  metadata, limits and pages; `contract.ids` and `contract.fastjson`, the ids and the JSON codec
  they use.

The services a provider is handed (storage, HTTP clients) are the runtime's: `ProviderContext`
gives them, and `runtime.storage` documents the database's interface.
"""
