"""A worker's OpenTelemetry tracing, when [telemetry] turns it on (docs/tracing.md).

One tracer provider per worker, not the process-wide one: its spans go to
the configured OTLP/HTTP endpoint (or, in tests and benchmarks, to the
exporter given), batched on the SDK's own thread. The worker gets three
interceptors: temporalio.contrib.opentelemetry's TracingInterceptor (spans
of activity attempts, and the trace context carried in every activity's and
child workflow's headers), the workflow spans of runtime/workflow_spans.py
(run, step, tool call) and the think's chat span (activities/tracing.py).
runtime/worker_factory.py imports this module only when tracing is on.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from urllib.parse import urlsplit

from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter
from opentelemetry.trace import Tracer
from temporalio.client import Client
from temporalio.contrib.opentelemetry import TracingInterceptor
from temporalio.worker import Interceptor

from activities.redaction import Redactor
from activities.tracing import ThinkSpansInterceptor
from agent_model.payload import clip
from agent_model.trace_attributes import CONTENT_CHARS, Capture, printable
from config.llm_settings import LLMSettings
from config.telemetry_settings import TelemetrySettings, shown_url
from runtime.workflow_spans import PinnedIds, WorkflowSpansInterceptor

log = logging.getLogger(__name__)

EXPORT_TIMEOUT_SECONDS = 5.0
"""One export's bound: a collector that does not answer never holds a batch
(or the worker's shutdown, which flushes) longer than this."""
SHUTDOWN_TIMEOUT_MILLIS = 10_000
"""The last flush at shutdown: two exports' worth."""
TRACER_NAME = "durable-manus"


class Tracing:
    """The worker's tracer provider and where its spans go."""

    def __init__(
        self, telemetry: TelemetrySettings, exporter: SpanExporter, where: str, batched: bool = True
    ) -> None:
        self.telemetry, self.where = telemetry, where
        processor: SpanProcessor = BatchSpanProcessor(exporter) if batched else SimpleSpanProcessor(exporter)
        self.provider = TracerProvider(
            resource=Resource.create({SERVICE_NAME: telemetry.service_name}),
            id_generator=PinnedIds(),
            shutdown_on_exit=False,  # the worker shuts it down, flushing what is left
        )
        self.provider.add_span_processor(processor)
        self.tracer: Tracer = self.provider.get_tracer(TRACER_NAME)

    def describe(self) -> str:
        content = "with content (redacted)" if self.telemetry.capture_content else "without prompts or replies"
        return f"tracing: spans to {self.where} as service {self.telemetry.service_name!r}, {content}"

    def interceptors(
        self, client: Client | None, llm: dict[str, LLMSettings], redactor: Redactor
    ) -> list[Interceptor]:
        """The worker's (or a Replayer's) tracing interceptors, outermost first;
        the contrib one only when the client has none (it would apply twice)."""
        capture = content_capture(redactor) if self.telemetry.capture_content else None
        found: Sequence[object] = client.config().get("interceptors", ()) if client is not None else ()
        contrib: list[Interceptor] = [] if any(isinstance(i, TracingInterceptor) for i in found) else [TracingInterceptor(self.tracer)]
        return [*contrib, WorkflowSpansInterceptor(self.tracer, capture), ThinkSpansInterceptor(self.tracer, llm, capture)]

    def close(self) -> None:
        """Exports what is left (bounded) and stops the exporter."""
        self.provider.force_flush(SHUTDOWN_TIMEOUT_MILLIS)
        self.provider.shutdown()


def content_capture(redactor: Redactor) -> Capture:
    def capture(text: str, limit: int | None = CONTENT_CHARS) -> str:
        # Redacted before the cut, so no part of a key survives at the edge.
        return clip(printable(redactor.text(text)), limit)

    return capture


def tracing_for(telemetry: TelemetrySettings) -> Tracing | None:
    """The worker's tracing to [telemetry] otlp_endpoint; None when it is off."""
    if not telemetry.enabled:
        return None
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    url = telemetry.traces_url
    # Headers (a backend's key) come from OTEL_EXPORTER_OTLP_HEADERS, read by the exporter.
    exporter = OTLPSpanExporter(endpoint=url, timeout=EXPORT_TIMEOUT_SECONDS)
    return Tracing(telemetry, exporter, f"{shown_url(url)}{urlsplit(url).path} (OTLP/HTTP)")
