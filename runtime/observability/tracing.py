"""OpenTelemetry traces (the OpenTelemetry SDK), off unless run.yaml's `server.tracing` is set.

One tracer provider per app, not the process-wide one: two stacks in one process, or an
application that embeds the library client and traces itself, keep their own. The app's one
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

__all__ = ["Tracing", "current_tracing"]

T = TypeVar("T")

_FINISH = re.compile(rb'"finish_reason"\s*:\s*"([a-z_]+)"')
# Anthropic's stop reasons (a Messages request passed through), read when an answer has no finish
# reason: by name, since a chat answer may have a `stop_reason` of its own (vLLM's: the stop string).
_STOP = re.compile(rb'"stop_reason"\s*:\s*"(end_turn|max_tokens|stop_sequence|tool_use|pause_turn|refusal|model_context_window_exceeded)"')
_CONTENT_LIMIT = 16_000


class Tracing:
    def __init__(self, config: TracingConfig) -> None:
        # Imported here: a stack without tracing does not load the SDK at all.
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor
        from opentelemetry.sdk.trace.sampling import ALWAYS_ON, ParentBased
        from opentelemetry.trace import SpanKind, Status, StatusCode

        self.config = config
        self.kinds, self._status, self._error = SpanKind, Status, StatusCode.ERROR
        # A request without a caller's trace is sampled by `enter` (at `sample_ratio`, before any span
        # is made); a caller's trace decides for itself (ParentBased). The SDK's own ratio sampler on
        # top of that sampled the sampled requests again: 1 % of them recorded at a ratio of 10 %.
        self.provider = TracerProvider(resource=Resource.create({"service.name": config.service_name}),
                                       sampler=ParentBased(ALWAYS_ON))
        self.exporter: Any = None
        self._pipe: Any = None
        if config.exporter == "memory":
            from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

            self.exporter = InMemorySpanExporter()
            self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        elif config.exporter == "console":
            self.provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter()))
        else:  # encoded and posted by a process of its own, off the event loop's interpreter lock
            from runtime.observability.span_export import PipeSpanProcessor

            self._pipe = PipeSpanProcessor(config.otlp_endpoint, dict(self.provider.resource.attributes))
            self.provider.add_span_processor(self._pipe)
        self.tracer = self.provider.get_tracer("stack")
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self._propagator = TraceContextTextMapPropagator()

    # --- the request -------------------------------------------------------------------------

    def enter(self, scope: Mapping[str, Any], request_id: str | None) -> tuple[Any, contextvars.Token[Tracing | None], Any] | None:
        """Open the request's server span (in the caller's trace when its `traceparent` header names
        one) and make it current; None when the sampler leaves the request out, which then costs
        nothing more: no span below it is made."""
        from opentelemetry import context, trace

        parent = None
        for name, value in scope.get("headers") or ():
            if name == b"traceparent":
                parent = self._propagator.extract({"traceparent": value.decode("latin-1")})
                break
        if parent is None and self.config.sample_ratio < 1 and random.random() >= self.config.sample_ratio:
            return None  # decided here: the SDK's own sampler would first make ids and a span object (about 50 µs)
        span = self.tracer.start_span(f"{scope.get('method', 'WS')} {scope['path']}", context=parent, kind=self.kinds.SERVER)
        if not span.is_recording():
            return None
        span.set_attributes({"http.request.method": str(scope.get("method", "GET")), "url.path": str(scope["path"]),
                             "stack.request_id": request_id or ""})
        attached = context.attach(trace.set_span_in_context(span))
        return span, _current.set(self), attached

    def leave(self, entered: tuple[Any, contextvars.Token[Tracing | None], Any], scope: Mapping[str, Any], route: str,
              status: int) -> None:
        from opentelemetry import context

        span, current, attached = entered
        span.update_name(f"{scope.get('method', 'WS')} {route}")
        span.set_attribute("http.route", route)
        span.set_attribute("http.response.status_code", status)
        principal = (scope.get("state") or {}).get("principal")  # set by runtime.security.auth, when auth is on
        if principal is not None:
            span.set_attribute("enduser.id", principal.id)
        if status >= 500:
            span.set_status(self._status(self._error))
        span.end()
        context.detach(attached)
        _current.reset(current)

    # --- inside the request ----------------------------------------------------------------------

    @contextlib.contextmanager
    def model_call(self, operation: str, provider: str, model: str, body: Mapping[str, Any]) -> Iterator[Any]:
        """A client span around one model call; `finished(span, usage, answer)` records its outcome."""
        span = self.start_model_call(operation, provider, model, body)
        try:
            yield span
        except BaseException as error:
            span.record_exception(error)
            span.set_status(self._status(self._error))
            raise
        finally:
            span.end()

    def start_model_call(self, operation: str, provider: str, model: str, body: Mapping[str, Any]) -> Any:
        """The span of a model call, not made current (a stream's span outlives the context it
        was opened in: it is iterated from the response's task); its caller ends it."""
        span = self.tracer.start_span(f"{operation} {model}", kind=self.kinds.CLIENT, attributes={
            "gen_ai.operation.name": operation, "gen_ai.provider.name": provider, "gen_ai.request.model": model})
        if self.config.capture_content and body.get("messages") is not None:
            span.set_attribute("gen_ai.input.messages", json.dumps(body["messages"])[:_CONTENT_LIMIT])
        return span

    def finished(self, span: Any, usage: Mapping[str, Any], answer: bytes | None = None) -> None:
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
        with self.tracer.start_as_current_span(f"execute_tool {name}", kind=self.kinds.INTERNAL, attributes={
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name, "gen_ai.tool.call.id": call_id}):
            return await work

    async def store(self, operation: str, system: str, work: Awaitable[T]) -> T:
        reset = _in_store.set(True)  # the traced call runs the untraced one: no second span
        try:
            with self.tracer.start_as_current_span(f"db {operation}", kind=self.kinds.CLIENT, attributes={
                    "db.system.name": system, "db.operation.name": operation}):
                return await work
        finally:
            _in_store.reset(reset)

    def shutdown(self) -> None:
        self.provider.shutdown()

    async def aclose(self) -> None:
        """The server stops: the spans not exported yet are sent (OTLP), then the SDK shuts down."""
        if self._pipe is not None:
            await self._pipe.aclose()
        self.provider.shutdown()


_current: contextvars.ContextVar[Tracing | None] = contextvars.ContextVar("tracing", default=None)
_in_store: contextvars.ContextVar[bool] = contextvars.ContextVar("traced_store", default=False)


def current_tracing() -> Tracing | None:
    """The tracing of the app serving the current request (None when tracing is off)."""
    return _current.get()


def store_tracing() -> Tracing | None:
    """The tracing a store transaction is to open a span in (None: off, or already inside one)."""
    tracing = _current.get()
    return None if tracing is None or _in_store.get() else tracing
