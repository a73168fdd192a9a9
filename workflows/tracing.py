"""The spans a run's workflow opens (the run, each step, each tool call), when
the worker traces (docs/tracing.md).

The worker hands the workflow one function, through Temporal's extern
functions (runtime/workflow_spans.py); without it, as on a worker that does
not trace, every span here is a no-op and nothing of OpenTelemetry is
loaded. Opening and closing a span issues no command, so a run's history is
the same with tracing on or off, and it replays on either kind of worker.
A span is exported only when it closes outside replay: a run replayed after
an eviction or on another worker exports none of the spans it had closed
before, and those it closes afterwards under the same ids.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Protocol

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from agent_model.trace_attributes import CONTINUED, AttributeValue, SpanStart

OPEN_SPAN = "durable_manus_open_span"
"""The extern function's name: SpanStart -> WorkflowSpan."""


class WorkflowSpan(Protocol):
    def set(self, attributes: Mapping[str, AttributeValue]) -> None: ...

    def capture(self, key: str, text: str) -> None:
        """Content for the span, kept only where [telemetry] capture_content is on."""

    def fail(self, error_type: str) -> None: ...

    def close(self, end_ns: int, replaying: bool) -> None: ...

    def abandon(self) -> None:
        """The workflow is torn down: the span leaves the context, unexported."""


class _NoSpan:
    def set(self, attributes: Mapping[str, AttributeValue]) -> None:
        pass

    def capture(self, key: str, text: str) -> None:
        pass

    def fail(self, error_type: str) -> None:
        pass

    def close(self, end_ns: int, replaying: bool) -> None:
        pass

    def abandon(self) -> None:
        pass


NO_SPAN = _NoSpan()


def error_type_of(error: BaseException) -> str:
    if isinstance(error, ApplicationError) and error.type:
        return error.type
    return type(error).__name__


@contextmanager
def workflow_span(
    name: str,
    key: str,
    attributes: Mapping[str, AttributeValue] | None = None,
    content: Mapping[str, str] | None = None,
    expected: tuple[type[BaseException], ...] = (),
) -> Iterator[WorkflowSpan]:
    """A span around the block, current while it runs (the activities and
    child workflows it starts are its children). `key` names the span's
    place in the run; `expected`: exceptions that end the block without
    failing the span (the run's own endings)."""
    open_span = workflow.extern_functions().get(OPEN_SPAN)
    if open_span is None:
        yield NO_SPAN
        return
    info = workflow.info()
    span: WorkflowSpan = open_span(
        SpanStart(name, key, info.workflow_id, info.run_id, workflow.time_ns(), dict(attributes or {}), dict(content or {}))
    )
    try:
        yield span
    except GeneratorExit:
        # Garbage collection of an evicted run: no workflow to ask the time of.
        span.abandon()
        raise
    except BaseException as error:
        if isinstance(error, workflow.ContinueAsNewError):
            span.set({CONTINUED: True})
        elif not isinstance(error, expected):
            span.fail(error_type_of(error))
        _close(span)
        raise
    _close(span)


def _close(span: WorkflowSpan) -> None:
    # An eviction counts as replay in the SDK, so a run dropped from the
    # cache exports nothing on its way out.
    span.close(workflow.time_ns(), workflow.unsafe.is_replaying_history_events())
