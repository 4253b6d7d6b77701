"""Provider specs for resolver and stack tests, registered as real entry points by `entry_points`.

Every provider records its start and stop in EVENTS, so tests can check the order of hooks.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from contract.spec import Api, EmptyConfig, ProviderContext, ProviderSpec
from contract.safety.protocol import Guardrails, moderation_result
from contract.tool_runtime.protocol import PublicTool

EVENTS: list[str] = []


class UrlConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    base_url: str
    timeout_s: float = Field(default=10.0, gt=0)
    api_key: str | None = None


@dataclass
class Recorded:
    """What a specimen provider yields: who it is and what it was given."""

    provider_id: str
    config: BaseModel
    deps: dict[Api, Any] = field(default_factory=dict)


@dataclass
class RecordedInference(Recorded):
    """A specimen inference provider: it serves no models and is never asked for completions."""

    async def list_models(self) -> list[Any]:
        return []

    async def chat_completion(self, request: Any) -> bytes:
        raise NotImplementedError("specimen providers answer no requests")

    async def stream_chat_completion(self, request: Any) -> Any:
        raise NotImplementedError("specimen providers answer no requests")

    async def embeddings(self, request: Any) -> bytes:
        raise NotImplementedError("specimen providers answer no requests")


@dataclass
class RecordedSafety(Recorded):
    """A specimen safety provider: it runs no guardrails and flags nothing."""

    guardrails: Guardrails = field(default_factory=Guardrails)

    async def moderate(self, inputs: Any, model: str | None = None) -> dict[str, Any]:
        return {"id": "modr-specimen", "model": model or "specimen", "results": [moderation_result(()) for _ in inputs]}


@dataclass
class RecordedTools(Recorded):
    """A specimen tool runtime: it serves a tool type named after it and opens no sessions."""

    @property
    def tool_types(self) -> frozenset[str]:
        return frozenset({f"specimen-{self.provider_id}"})

    @property
    def item_types(self) -> frozenset[str]:
        return frozenset()

    async def check_tool(self, tool: Any, param: str) -> None:
        pass

    def public_tool(self, tool: Any) -> Any:
        return PublicTool(dict(tool))

    def render(self, item: Any) -> None:
        return None

    async def open_session(self, tools: Any, context: Any) -> Any:
        raise NotImplementedError("specimen providers answer no requests")


class FixedTools(RecordedTools):
    """A specimen tool runtime serving the type `specimen`, whatever its provider_id."""

    @property
    def tool_types(self) -> frozenset[str]:
        return frozenset({"specimen"})


@contextlib.asynccontextmanager
async def _incomplete_inference(context: ProviderContext[Any]) -> AsyncIterator[Recorded]:
    yield Recorded(context.provider_id, context.config)


def _recording(fail_on_start: bool = False, kind: type[Recorded] | None = None) -> Callable[[ProviderContext[Any]], contextlib.AbstractAsyncContextManager[Recorded]]:
    @contextlib.asynccontextmanager
    async def factory(context: ProviderContext[Any]) -> AsyncIterator[Recorded]:
        label = f"{context.api.value}/{context.provider_id}"
        if fail_on_start:
            EVENTS.append(f"fail {label}")
            raise ConnectionError("upstream refused the connection")
        EVENTS.append(f"start {label}")
        try:
            made = kind or {Api.inference: RecordedInference, Api.tool_runtime: RecordedTools, Api.safety: RecordedSafety}.get(
                context.api, Recorded)
            yield made(context.provider_id, context.config, dict(context.deps))
        finally:
            EVENTS.append(f"stop {label}")

    return factory


def _spec(api: Api, name: str, **kwargs: Any) -> ProviderSpec:
    kwargs.setdefault("config_model", EmptyConfig)
    kwargs.setdefault("factory", _recording())
    return ProviderSpec(api=api, name=name, description=f"specimen {name}", **kwargs)


INFERENCE_REMOTE = _spec(Api.inference, "remote", config_model=UrlConfig, sample_config={"base_url": "http://127.0.0.1:9"})
INFERENCE_LOCAL = _spec(Api.inference, "local", pip_packages=("local-runtime>=1",))
TOOLS_SPECIMEN = _spec(Api.tool_runtime, "specimen", requires=(Api.inference,), optional=(Api.vector_stores,))
VECTORS_SPECIMEN = _spec(Api.vector_stores, "specimen", requires=(Api.inference,))
SAFETY_OPTIONAL = _spec(Api.safety, "judge", optional=(Api.inference, Api.vector_stores))
FILES_FAILING = _spec(Api.files, "failing", requires=(Api.inference,), factory=_recording(fail_on_start=True))
TOOLS_FIXED = _spec(Api.tool_runtime, "fixed", factory=_recording(kind=FixedTools))
TOOLS_NEED_FILES = _spec(Api.tool_runtime, "needs-files", requires=(Api.files,))
FILES_NEED_TOOLS = _spec(Api.files, "needs-tools", requires=(Api.tool_runtime,))
INFERENCE_INCOMPLETE = _spec(Api.inference, "incomplete", factory=_incomplete_inference)
NOT_A_SPEC = {"api": "inference", "name": "dict"}
WRONG_NAME = _spec(Api.inference, "another-name")

ENTRY_POINTS: dict[Api, dict[str, str]] = {
    Api.inference: {
        "remote": "support.specimens:INFERENCE_REMOTE",
        "local": "support.specimens:INFERENCE_LOCAL",
        "incomplete": "support.specimens:INFERENCE_INCOMPLETE",
        "dict": "support.specimens:NOT_A_SPEC",
        "misnamed": "support.specimens:WRONG_NAME",
        "missing-module": "support.no_such_module:SPEC",
    },
    Api.vector_stores: {"specimen": "support.specimens:VECTORS_SPECIMEN"},
    Api.safety: {"judge": "support.specimens:SAFETY_OPTIONAL"},
    Api.files: {"failing": "support.specimens:FILES_FAILING", "needs-tools": "support.specimens:FILES_NEED_TOOLS"},
    Api.tool_runtime: {"needs-files": "support.specimens:TOOLS_NEED_FILES", "specimen": "support.specimens:TOOLS_SPECIMEN",
                     "fixed": "support.specimens:TOOLS_FIXED"},
}
