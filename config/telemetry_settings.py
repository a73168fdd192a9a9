"""`[telemetry]`: where the worker sends its OpenTelemetry spans (docs/tracing.md).

    [telemetry]
    otlp_endpoint = "http://127.0.0.1:4318"   # OTLP over HTTP; unset: no tracing
    service_name = "durable-manus"
    capture_content = false                   # true: the model's replies and tool I/O in spans, redacted

OTEL_EXPORTER_OTLP_ENDPOINT and OTEL_SERVICE_NAME override the first two
(config/environment.py); OTEL_SDK_DISABLED=true turns tracing off whatever
they say. Headers a backend wants (Langfuse's Authorization) stay in
OTEL_EXPORTER_OTLP_HEADERS, read by the exporter: they are keys.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

DEFAULT_SERVICE_NAME = "durable-manus"
TRACES_PATH = "/v1/traces"
"""OTLP/HTTP's path for spans below the endpoint's base URL (the OpenTelemetry
exporter specification: OTEL_EXPORTER_OTLP_ENDPOINT is a base)."""


class TelemetrySettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    otlp_endpoint: str | None = None
    """Base URL of an OTLP/HTTP receiver (a collector, Jaeger, Phoenix, Langfuse's
    /api/public/otel); spans go to <endpoint>/v1/traces. None: tracing is off."""
    service_name: str = Field(DEFAULT_SERVICE_NAME, min_length=1, max_length=200)
    capture_content: bool = False
    """Put the model's replies and the tools' arguments and observations in the
    spans (redacted, each cut to agent_model/trace_attributes.py CONTENT_CHARS).
    Off: counts, names and outcomes only."""
    disabled: bool = False
    """OTEL_SDK_DISABLED=true: no tracing even with an endpoint."""

    @field_validator("otlp_endpoint")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"otlp_endpoint must be an http:// or https:// URL, not {shown_url(value)!r}")
        if parts.username or parts.password:
            raise ValueError("otlp_endpoint must not carry a user or password; put them in OTEL_EXPORTER_OTLP_HEADERS")
        return value

    @property
    def enabled(self) -> bool:
        return self.otlp_endpoint is not None and not self.disabled

    @property
    def traces_url(self) -> str:
        """Where the exporter posts: the endpoint's base URL and /v1/traces."""
        assert self.otlp_endpoint is not None
        return self.otlp_endpoint.rstrip("/") + TRACES_PATH


def shown_url(value: str) -> str:
    """A URL for messages: scheme, host and port (no user, password, path or query)."""
    try:
        parts = urlsplit(value)
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "(not a URL)"
    if not parts.hostname:
        return value[:40]
    return f"{parts.scheme}://{parts.hostname}{port}"
