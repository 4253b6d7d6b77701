"""An API whose providers are all inactive keeps its routes: they answer 503, saying what to set.

A client that reaches `POST /v1/chat/completions` on a stack with no model provider learns what
the operator has to configure, instead of meeting an unknown route. `GET /v1/models` lists what
there is: nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from builder.resolve import InactiveProvider
from contract.spec import Api
from contract.errors import ServiceUnavailableError

__all__ = ["Unavailable", "unavailable_message"]


def unavailable_message(api: Api, inactive: Sequence[InactiveProvider]) -> str:
    ways = "; or ".join(f"{provider.hint().replace(' to enable it', '')} (provider {provider.provider_id!r})" for provider in inactive)
    return (f"The {api.value} API has no active provider on this server. To enable one, {ways}, then restart the server "
            "(its start-up log lists the providers and what each needs).")


class Unavailable:
    """Stands in for the implementation of an API with no active provider: any call, however
    deep (`impl.store.page(...)`), raises a 503 with the message."""

    def __init__(self, message: str) -> None:
        self._message = message

    def __getattr__(self, name: str) -> Unavailable:
        if name.startswith("__"):
            raise AttributeError(name)
        return self

    async def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise ServiceUnavailableError(self._message, code="no_active_provider")


class NoModels(Unavailable):
    """The inference API with no active provider: no model to list, every call a 503."""

    async def refresh_if_stale(self) -> None:
        return None

    def models(self) -> list[Any]:
        return []
