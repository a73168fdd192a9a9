"""The think's span: one `chat <model>` span per attempt, after the GenAI
semantic conventions (agent_model/trace_attributes.py), under the
RunActivity span of temporalio.contrib.opentelemetry's interceptor.

A worker-wide activity interceptor, placed inside the contrib one (its span
is then current) and outside the redaction, so that a reply captured with
[telemetry] capture_content is the reply as it goes into history. What the
span says without it: the profile, the model asked and the one that
answered, the provider, the token counts and the finish reason; an attempt
that failed says its error type (never its message, which may quote the
prompt or the provider's echo of a key). Only loaded when tracing is on.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from opentelemetry.trace import SpanKind, Status, StatusCode, Tracer
from temporalio import activity
from temporalio.exceptions import ApplicationError
from temporalio.worker import ActivityInboundInterceptor, ExecuteActivityInput, Interceptor

from agent_model.activity_specs import THINK
from agent_model.llm_io import ThinkRequest, ThinkResponse
from agent_model.trace_attributes import (
    ACTIVITY_ID,
    ERROR_TYPE,
    OUTPUT_MESSAGES,
    RUN_ID,
    WORKFLOW_ID,
    AttributeValue,
    Capture,
    chat_attributes,
    chat_end_attributes,
    chat_span_name,
    output_messages,
)
from config.llm_settings import LLMSettings


def asked_attributes(name: str, settings: LLMSettings) -> dict[str, AttributeValue]:
    """What the chat span says of the call before it is made."""
    try:
        parts = urlsplit(settings.base_url)
        host, port = parts.hostname, parts.port
    except ValueError:
        host, port = None, None
    return chat_attributes(
        name, settings.model, settings.api_type, settings.max_tokens, settings.temperature, host, port
    )


def error_type(error: BaseException) -> str:
    if isinstance(error, ApplicationError) and error.type:
        return error.type
    return type(error).__name__


class ThinkSpansInterceptor(Interceptor):
    def __init__(
        self, tracer: Tracer, llm: dict[str, LLMSettings], capture: Capture | None = None
    ) -> None:
        self.tracer, self.llm, self.capture = tracer, llm, capture

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _ThinkSpans(next, self)


class _ThinkSpans(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, root: ThinkSpansInterceptor) -> None:
        super().__init__(next)
        self.root = root

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        info = activity.info()
        request = input.args[0] if input.args else None
        if info.activity_type != THINK or not isinstance(request, ThinkRequest) or request.llm not in self.root.llm:
            return await super().execute_activity(input)
        settings = self.root.llm[request.llm]
        attributes = asked_attributes(request.llm, settings)
        attributes[ACTIVITY_ID] = info.activity_id
        attributes[WORKFLOW_ID] = info.workflow_id or ""
        attributes[RUN_ID] = info.workflow_run_id or ""
        with self.root.tracer.start_as_current_span(
            chat_span_name(settings.model),
            kind=SpanKind.CLIENT,
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                result = await super().execute_activity(input)
            except BaseException as e:
                span.set_attribute(ERROR_TYPE, error_type(e))
                span.set_status(Status(StatusCode.ERROR, error_type(e)))
                raise
            if isinstance(result, ThinkResponse):
                span.set_attributes(chat_end_attributes(result))
                if self.root.capture is not None:
                    span.set_attribute(OUTPUT_MESSAGES, self.root.capture(output_messages(result), None))
            return result
