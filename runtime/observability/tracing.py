"""OpenTelemetry traces, off unless run.yaml's `server.tracing` is set.

Spans are recorded by runtime.observability.spans (W3C ids, a caller's `traceparent` honoured) and
exported by the OpenTelemetry SDK: over OTLP/HTTP from a process of their own
(runtime.observability.span_export), or by its in-memory or console exporter. Each app has its own
tracing, never the process-wide provider: two stacks in one process, or an application that embeds
the library client and traces itself, keep their own. The app's one
middleware (runtime.http.middleware.RequestGuard) opens a server span per request, named by its route
template once routed; inside it the inference router opens a client span per model call (GenAI
semantic conventions: `gen_ai.operation.name`, `gen_ai.provider.name`, `gen_ai.request.model`,
`gen_ai.usage.input_tokens` and `output_tokens`, `gen_ai.response.finish_reasons`; prompt and
completion only with `capture_content`), the tool loop a span per tool call, and the storage layer
a span per transaction. Code reached without tracing pays one context-variable lookup.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import random
import re
from collections.abc import Awaitable, Iterator, Mapping
from typing import Any, TypeVar

from builder.config import TracingConfig
from runtime.observability.spans import CLIENT, INTERNAL, SERVER, Span, current_span, enter_span, leave_span, parse_traceparent

__all__ = ["Tracing", "current_trace_id", "current_tracing"]

Flat = tuple[Any, ...]

T = TypeVar("T")

_FINISH = re.compile(rb'"finish_reason"\s*:\s*"([a-z_]+)"')
# Anthropic's stop reasons (a Messages request passed through), read when an answer has no finish
# reason: by name, since a chat answer may have a `stop_reason` of its own (vLLM's: the stop string).
_STOP = re.compile(rb'"stop_reason"\s*:\s*"(end_turn|max_tokens|stop_sequence|tool_use|pause_turn|refusal|model_context_window_exceeded)"')
_CONTENT_LIMIT = 16_000


class Tracing:
    def __init__(self, config: TracingConfig) -> None:
        # The SDK is imported here, for the resource and the exporters: a stack without tracing
        # does not load it at all.
        from opentelemetry.sdk.resources import Resource

        self.config = config
        self.resource = Resource.create({"service.name": config.service_name})
        self.exporter: Any = None
        self._pipe: Any = None
        if config.exporter == "otlp":  # encoded and posted by a process of its own, off the event loop's interpreter lock
            from runtime.observability.span_export import PipeSpanProcessor

            self._pipe = PipeSpanProcessor(config.otlp_endpoint, dict(self.resource.attributes))
            self._sink: Any = self._pipe.add
        else:
            if config.exporter == "memory":
                from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

                self.exporter = InMemorySpanExporter()
            else:
                from opentelemetry.sdk.trace.export import ConsoleSpanExporter

                self.exporter = ConsoleSpanExporter()
            self._sink = self._export_now

    def _export_now(self, values: Flat) -> None:
        from runtime.observability.span_export import rebuilt

        self.exporter.export([rebuilt(values, self.resource)])

    # --- the request -------------------------------------------------------------------------

    def enter(self, scope: Mapping[str, Any], request_id: str | None) -> tuple[Span, Any, Any] | None:
        """Open the request's server span (in the caller's trace when its `traceparent` header names
        one) and make it current; None when the request is not sampled (a caller's trace that it
        did not sample, or `sample_ratio`), which then costs nothing more: no span below it is made."""
        caller = None
        for name, value in scope.get("headers") or ():
            if name == b"traceparent":
                caller = parse_traceparent(value)
                break
        if caller is not None:
            if not caller[2]:
                return None  # the caller's trace is not sampled: neither is this part of it
        elif self.config.sample_ratio < 1 and random.random() >= self.config.sample_ratio:
            return None
        span = Span(self._sink, f"{scope.get('method', 'WS')} {scope['path']}", SERVER, caller[:2] if caller is not None else None,
                    {"http.request.method": str(scope.get("method", "GET")), "url.path": str(scope["path"]),
                     "stack.request_id": request_id or ""})
        return span, _current.set(self), enter_span(span)

    def leave(self, entered: tuple[Span, Any, Any], scope: Mapping[str, Any], route: str, status: int) -> None:
        span, current, attached = entered
        span.update_name(f"{scope.get('method', 'WS')} {route}")
        span.set_attribute("http.route", route)
        span.set_attribute("http.response.status_code", status)
        principal = (scope.get("state") or {}).get("principal")  # set by runtime.security.auth, when auth is on
        if principal is not None:
            span.set_attribute("enduser.id", principal.id)
        if status >= 500:
            span.set_error()
        span.end()
        leave_span(attached)
        _current.reset(current)

    # --- inside the request ----------------------------------------------------------------------

    @contextlib.contextmanager
    def model_call(self, operation: str, provider: str, model: str, body: Mapping[str, Any]) -> Iterator[Span]:
        """A client span around one model call; `finished(span, usage, answer)` records its outcome."""
        with self._ended(self.start_model_call(operation, provider, model, body)) as span:
            yield span

    def start_model_call(self, operation: str, provider: str, model: str, body: Mapping[str, Any]) -> Span:
        """The span of a model call, not made current (a stream's span outlives the context it
        was opened in: it is iterated from the response's task); its caller ends it."""
        span = Span(self._sink, f"{operation} {model}", CLIENT, current_span(), {
            "gen_ai.operation.name": operation, "gen_ai.provider.name": provider, "gen_ai.request.model": model})
        if self.config.capture_content and body.get("messages") is not None:
            span.set_attribute("gen_ai.input.messages", json.dumps(body["messages"])[:_CONTENT_LIMIT])
        return span

    def finished(self, span: Span | None, usage: Mapping[str, Any], answer: bytes | None = None) -> None:
        if span is None:
            return
        for attribute, key in (("gen_ai.usage.input_tokens", "prompt_tokens"), ("gen_ai.usage.output_tokens", "completion_tokens")):
            if isinstance(usage.get(key), int):
                span.set_attribute(attribute, usage[key])
        if answer is not None:
            reasons = [match.decode() for match in _FINISH.findall(answer) or _STOP.findall(answer)]
            if reasons:
                span.set_attribute("gen_ai.response.finish_reasons", reasons)
            if self.config.capture_content:
                span.set_attribute("gen_ai.output.messages", answer[:_CONTENT_LIMIT].decode(errors="replace"))

    async def tool_call(self, name: str, call_id: str, work: Awaitable[T]) -> T:
        with self._current_span(f"execute_tool {name}", INTERNAL, {
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name, "gen_ai.tool.call.id": call_id}):
            return await work

    async def store(self, operation: str, system: str, work: Awaitable[T]) -> T:
        reset = _in_store.set(True)  # the traced call runs the untraced one: no second span
        try:
            with self._current_span(f"db {operation}", CLIENT, {"db.system.name": system, "db.operation.name": operation}):
                return await work
        finally:
            _in_store.reset(reset)

    def _current_span(self, name: str, kind: int, attributes: dict[str, Any]) -> contextlib.AbstractContextManager[Span]:
        """A span made current while the block runs."""
        return self._ended(Span(self._sink, name, kind, current_span(), attributes), current=True)

    @staticmethod
    @contextlib.contextmanager
    def _ended(span: Span, current: bool = False) -> Iterator[Span]:
        """`span` over a block, ended with it (an exception leaving it recorded, as the SDK's would);
        with `current`, the current span while it runs."""
        token = enter_span(span) if current else None
        try:
            yield span
        except BaseException as error:
            span.failed(error)
            raise
        finally:
            if token is not None:
                leave_span(token)
            span.end()

    async def aclose(self) -> None:
        """The server stops: the spans not exported yet are sent (OTLP)."""
        if self._pipe is not None:
            await self._pipe.aclose()


def current_trace_id() -> str | None:
    """The current span's trace id in hex (for log lines), or None outside a sampled request."""
    span = current_span()
    return format(span.trace_id, "032x") if span is not None else None


_current: contextvars.ContextVar[Tracing | None] = contextvars.ContextVar("tracing", default=None)
_in_store: contextvars.ContextVar[bool] = contextvars.ContextVar("traced_store", default=False)


def current_tracing() -> Tracing | None:
    """The tracing of the app serving the current request (None when tracing is off)."""
    return _current.get()


def store_tracing() -> Tracing | None:
    """The tracing a store transaction is to open a span in (None: off, or already inside one)."""
    tracing = _current.get()
    return None if tracing is None or _in_store.get() else tracing
