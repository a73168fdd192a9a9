"""The worker's side of the spans workflow code opens (workflows/tracing.py).

temporalio.contrib.opentelemetry's TracingInterceptor makes every span of a
workflow at once, with no duration, and none while it replays. A run, a step
and a tool call last, and the activities they start must be their children
even when the run was replayed in between (a worker restarted, the run was
evicted, another worker took it). So each such span gets an id derived from
the run's ids and its place in the run (agent_model/trace_attributes.py):

* opened, in replay or not, the span becomes the current context under that
  id; what the workflow starts inside it (the contrib interceptor's
  StartActivity spans, the activities' headers) names it as parent;
* closed outside replay, it is exported once, from its opening's workflow
  time to its closing's, under that id; closed in replay, it was exported
  before, and nothing is.

Only this module and runtime/tracing.py import OpenTelemetry's SDK, and
only when [telemetry] turns tracing on.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar, Token

import opentelemetry.context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode, TraceFlags, Tracer
from temporalio.worker import Interceptor, WorkflowInboundInterceptor, WorkflowInterceptorClassInput

from agent_model.trace_attributes import (
    ERROR_TYPE,
    RUN_ID,
    WORKFLOW_ID,
    AttributeValue,
    Capture,
    SpanStart,
    span_id_of,
    trace_id_of,
)
from workflows.tracing import OPEN_SPAN

_PINNED: ContextVar[tuple[int, int] | None] = ContextVar("durable_manus_pinned_span_ids", default=None)


class PinnedIds(IdGenerator):
    """The tracer provider's ids: random, but while a workflow span is made, its own."""

    def __init__(self) -> None:
        self._random = RandomIdGenerator()

    def generate_span_id(self) -> int:
        pinned = _PINNED.get()
        return pinned[1] if pinned is not None else self._random.generate_span_id()

    def generate_trace_id(self) -> int:
        pinned = _PINNED.get()
        return pinned[0] if pinned is not None else self._random.generate_trace_id()


@contextmanager
def _pinned(trace_id: int, span_id: int) -> Iterator[None]:
    token = _PINNED.set((trace_id, span_id))
    try:
        yield
    finally:
        _PINNED.reset(token)


class OpenWorkflowSpan:
    """One span the workflow has open: current in its context until closed."""

    def __init__(self, tracer: Tracer, start: SpanStart, capture: Capture | None) -> None:
        self._tracer, self._start, self._capture = tracer, start, capture
        self._parent = otel_context.get_current()
        parent = trace.get_current_span(self._parent).get_span_context()
        trace_id = parent.trace_id if parent.is_valid else trace_id_of(start.workflow_id, start.run_id)
        flags = parent.trace_flags if parent.is_valid else TraceFlags(TraceFlags.SAMPLED)
        self.span_context = SpanContext(
            trace_id, span_id_of(start.workflow_id, start.run_id, start.key), is_remote=False, trace_flags=flags
        )
        self._attributes: dict[str, AttributeValue] = {
            **start.attributes,
            WORKFLOW_ID: start.workflow_id,
            RUN_ID: start.run_id,
        }
        if capture is not None:
            self._attributes.update({key: capture(text) for key, text in start.content.items()})
        self._error: str | None = None
        self._token: Token[Context] | None = otel_context.attach(
            trace.set_span_in_context(NonRecordingSpan(self.span_context), self._parent)
        )

    def set(self, attributes: Mapping[str, AttributeValue]) -> None:
        self._attributes.update(attributes)

    def capture(self, key: str, text: str) -> None:
        if self._capture is not None:
            self._attributes[key] = self._capture(text)

    def fail(self, error_type: str) -> None:
        self._error = error_type[:200]

    def close(self, end_ns: int, replaying: bool) -> None:
        self._detach()
        if replaying:
            return
        if self._error is not None:
            self._attributes.setdefault(ERROR_TYPE, self._error)
        ids = self.span_context
        with _pinned(ids.trace_id, ids.span_id):
            span = self._tracer.start_span(
                self._start.name,
                context=self._parent,
                kind=SpanKind.INTERNAL,
                attributes=self._attributes,
                start_time=self._start.start_ns,
            )
        if self._error is not None:
            span.set_status(Status(StatusCode.ERROR, self._error))
        span.end(end_time=max(end_ns, self._start.start_ns))

    def abandon(self) -> None:
        self._detach()

    def _detach(self) -> None:
        token, self._token = self._token, None
        if token is None:
            return
        try:
            token.var.reset(token)
        except (ValueError, RuntimeError):
            # A context torn down elsewhere (an evicted run collected on another thread): nothing to restore.
            pass


class WorkflowSpansInterceptor(Interceptor):
    """Hands the workflows the function that opens their spans."""

    def __init__(self, tracer: Tracer, capture: Capture | None = None) -> None:
        self.tracer, self.capture = tracer, capture

    def open(self, start: SpanStart) -> OpenWorkflowSpan:
        return OpenWorkflowSpan(self.tracer, start, self.capture)

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor] | None:
        input.unsafe_extern_functions[OPEN_SPAN] = self.open
        return None
