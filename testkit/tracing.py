"""Tracing for tests and benchmarks: a worker's spans kept in memory, and a
local OTLP/HTTP receiver that counts what the exporter posts."""

from __future__ import annotations

from collections.abc import Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from config.telemetry_settings import TelemetrySettings
from runtime.tracing import Tracing
from testkit.threaded_server import serve_in_thread, stop_serving


def in_memory_tracing(**telemetry: Any) -> tuple[Tracing, InMemorySpanExporter]:
    """A worker's tracing whose spans are kept in the returned exporter, each
    as it ends (no batching, so a test reads them as soon as the run is over)."""
    exporter = InMemorySpanExporter()
    settings = TelemetrySettings(otlp_endpoint="http://127.0.0.1:4318", **telemetry)
    return Tracing(settings, exporter, "memory", batched=False), exporter


def named(spans: Iterable[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [span for span in spans if span.name == name]


def parent_of(span: ReadableSpan, spans: Iterable[ReadableSpan]) -> ReadableSpan | None:
    if span.parent is None:
        return None
    return next((s for s in spans if s.context.span_id == span.parent.span_id), None)


def ancestors(span: ReadableSpan, spans: list[ReadableSpan]) -> list[ReadableSpan]:
    """The span's parent, its parent's, ... as far as the spans go."""
    found = []
    while (parent := parent_of(span, spans)) is not None:
        found.append(parent)
        span = parent
    return found


class OtlpReceiver:
    """A local OTLP/HTTP endpoint: keeps every request's path, content type
    and decoded spans; answers 200 as a collector does."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, ExportTraceServiceRequest]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                decoded = ExportTraceServiceRequest()
                decoded.ParseFromString(body)
                receiver.requests.append((self.path, self.headers.get("Content-Type", ""), decoded))
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass

        self.server = serve_in_thread(ThreadingHTTPServer(("127.0.0.1", 0), Handler))

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def span_names(self) -> list[str]:
        return [
            span.name
            for _, _, request in self.requests
            for resource in request.resource_spans
            for scope in resource.scope_spans
            for span in scope.spans
        ]

    def service_names(self) -> set[str]:
        return {
            attribute.value.string_value
            for _, _, request in self.requests
            for resource in request.resource_spans
            for attribute in resource.resource.attributes
            if attribute.key == "service.name"
        }

    def stop(self) -> None:
        stop_serving(self.server)
