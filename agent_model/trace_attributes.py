"""What the spans of a run say: names and attributes, after OpenTelemetry's
GenAI semantic conventions (https://opentelemetry.io/docs/specs/semconv/gen-ai/).

Pure: the workflow (run, step and tool-call spans) and the think activity's
interceptor (chat spans) build their attributes here; nothing imports
OpenTelemetry. No attribute carries a prompt, a reply, an argument or an
observation: those are content, added only where [telemetry] capture_content
asks for them (redacted, by the worker). Span ids are derived from the run's
ids and the span's place in it, so the workflow names the same span on every
replay (docs/tracing.md).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, Union

from agent_model.llm_io import ThinkResponse
from agent_model.usage import TokenUsage

AttributeValue = Union[str, bool, int, float, Sequence[str]]
Attributes = Mapping[str, AttributeValue]

OPERATION = "gen_ai.operation.name"
PROVIDER = "gen_ai.provider.name"
SYSTEM = "gen_ai.system"
"""The provider's name under its older key (semantic conventions 1.36 and
before), which Langfuse and Phoenix still read."""
REQUEST_MODEL = "gen_ai.request.model"
REQUEST_MAX_TOKENS = "gen_ai.request.max_tokens"
REQUEST_TEMPERATURE = "gen_ai.request.temperature"
RESPONSE_MODEL = "gen_ai.response.model"
FINISH_REASONS = "gen_ai.response.finish_reasons"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
CACHED_INPUT_TOKENS = "gen_ai.usage.cache_read.input_tokens"
AGENT_NAME = "gen_ai.agent.name"
AGENT_ID = "gen_ai.agent.id"
CONVERSATION_ID = "gen_ai.conversation.id"
TOOL_NAME = "gen_ai.tool.name"
TOOL_CALL_ID = "gen_ai.tool.call.id"
TOOL_TYPE = "gen_ai.tool.type"
TOOL_ARGUMENTS = "gen_ai.tool.call.arguments"
TOOL_RESULT = "gen_ai.tool.call.result"
OUTPUT_MESSAGES = "gen_ai.output.messages"
ERROR_TYPE = "error.type"
SERVER_ADDRESS = "server.address"
SERVER_PORT = "server.port"

WORKFLOW_ID = "temporalWorkflowID"
RUN_ID = "temporalRunID"
ACTIVITY_ID = "temporalActivityID"
"""The keys temporalio.contrib.opentelemetry puts on its own spans."""

STEP = "durable_manus.step"
TURN = "durable_manus.turn"
STOP_REASON = "durable_manus.stop_reason"
RUN_STATE = "durable_manus.state"
STEPS_TAKEN = "durable_manus.steps"
TOOL_OUTCOME = "durable_manus.tool.outcome"
TOOL_CALLS = "durable_manus.tool_calls"
APPROVAL = "durable_manus.approval"
CONTINUED = "durable_manus.continued_as_new"
LLM_PROFILE = "durable_manus.llm"
FLOW_OUTCOME = "durable_manus.flow.outcome"

PROVIDERS = {"openai": "openai", "azure": "azure.ai.openai", "mistral": "mistral_ai", "xai": "x_ai", "gemini": "gcp.gemini"}
"""[llm] api_type -> the conventions' provider name where they list one;
any other api_type is its own name."""

CONTENT_CHARS = 4000
"""Characters of one captured text (a reply's, a tool's arguments or observation)."""

NAME_CHARS = 64
"""Characters of a model-given name (a tool's) in a span name or attribute."""


def provider_name(api_type: str) -> str:
    return PROVIDERS.get(api_type, api_type)


def plain_name(name: str) -> str:
    """A name the model wrote, safe for a span name: letters, digits and
    ``_.-:/`` only, at most NAME_CHARS."""
    kept = "".join(c if c.isascii() and (c.isalnum() or c in "_.-:/") else "_" for c in name[:NAME_CHARS])
    return kept or "_"


# ---- spans of the workflow ----------------------------------------------------------


def run_span_name(agent: str) -> str:
    return f"invoke_agent {plain_name(agent)}"


def run_attributes(agent: str, workflow_id: str) -> dict[str, AttributeValue]:
    return {OPERATION: "invoke_agent", AGENT_NAME: plain_name(agent), AGENT_ID: workflow_id, CONVERSATION_ID: workflow_id}


def run_end_attributes(state: str, stop_reason: str, steps: int, usage: TokenUsage) -> dict[str, AttributeValue]:
    return {RUN_STATE: state, STOP_REASON: stop_reason, STEPS_TAKEN: steps, **usage_attributes(usage)}


def flow_span_name(name: str) -> str:
    return f"invoke_workflow {plain_name(name)}"


def step_span_name(step: int) -> str:
    return f"step {step}"


def step_attributes(step: int, turn: int) -> dict[str, AttributeValue]:
    return {STEP: step, TURN: turn}


def step_end_attributes(usage: TokenUsage, tool_calls: int, model: str | None) -> dict[str, AttributeValue]:
    ended: dict[str, AttributeValue] = {TOOL_CALLS: tool_calls, **usage_attributes(usage)}
    if model:
        ended[RESPONSE_MODEL] = model
    return ended


def tool_span_name(tool: str) -> str:
    return f"execute_tool {plain_name(tool)}"


def tool_attributes(tool: str, call_id: str, step: int) -> dict[str, AttributeValue]:
    return {OPERATION: "execute_tool", TOOL_NAME: plain_name(tool), TOOL_CALL_ID: plain_name(call_id), TOOL_TYPE: "function", STEP: step}


def tool_end_attributes(error: bool, ran: bool, approval: str | None = None) -> dict[str, AttributeValue]:
    """`ran`: the call reached its tool (False: the run refused or skipped it)."""
    outcome = "not_run" if not ran else "error" if error else "ok"
    ended: dict[str, AttributeValue] = {TOOL_OUTCOME: outcome}
    if outcome != "ok":
        ended[ERROR_TYPE] = "tool_not_run" if not ran else "tool_error"
    if approval is not None:
        ended[APPROVAL] = approval
    return ended


def usage_attributes(usage: TokenUsage) -> dict[str, AttributeValue]:
    counted: dict[str, AttributeValue] = {INPUT_TOKENS: usage.prompt_tokens, OUTPUT_TOKENS: usage.completion_tokens}
    if usage.cached_prompt_tokens:
        counted[CACHED_INPUT_TOKENS] = usage.cached_prompt_tokens
    return counted


# ---- the think's chat span -----------------------------------------------------------


def chat_span_name(model: str) -> str:
    return f"chat {model[:200]}"


def chat_attributes(
    llm: str, model: str, api_type: str, max_tokens: int, temperature: float, host: str | None, port: int | None
) -> dict[str, AttributeValue]:
    provider = provider_name(api_type)
    asked: dict[str, AttributeValue] = {
        OPERATION: "chat",
        PROVIDER: provider,
        SYSTEM: provider,
        REQUEST_MODEL: model,
        REQUEST_MAX_TOKENS: max_tokens,
        REQUEST_TEMPERATURE: temperature,
        LLM_PROFILE: llm,
    }
    if host:
        asked[SERVER_ADDRESS] = host
    if port:
        asked[SERVER_PORT] = port
    return asked


def chat_end_attributes(response: ThinkResponse) -> dict[str, AttributeValue]:
    answered: dict[str, AttributeValue] = usage_attributes(response.usage)
    if response.model:
        answered[RESPONSE_MODEL] = response.model
    if response.finish_reason:
        answered[FINISH_REASONS] = [response.finish_reason]
    return answered


def output_messages(response: ThinkResponse, limit: int = CONTENT_CHARS) -> str:
    """The reply as the conventions' gen_ai.output.messages JSON (opt-in
    content): its text and tool calls share `limit` characters."""
    message = response.message
    calls = message.tool_calls or []
    share = max(200, limit // (len(calls) + 1))
    parts: list[dict[str, str]] = []
    if message.content:
        parts.append({"type": "text", "content": message.content[:share]})
    for call in calls:
        parts.append(
            {"type": "tool_call", "id": plain_name(call.id), "name": plain_name(call.function.name), "arguments": call.function.arguments[:share]}
        )
    return json.dumps([{"role": "assistant", "parts": parts, "finish_reason": response.finish_reason or ""}])


class Capture(Protocol):
    """Makes a text fit for a span (the worker's: redacted, cleaned, cut to
    `limit` characters; None: a JSON text already bounded, kept whole)."""

    def __call__(self, text: str, limit: int | None = CONTENT_CHARS) -> str: ...


def printable(text: str) -> str:
    """`text` without control characters but newlines and tabs: a span may end
    up in a terminal (a collector's debug exporter)."""
    return "".join(c if c.isprintable() or c in "\n\t" else " " for c in text)


# ---- ids the workflow's spans keep across replays -------------------------------------


@dataclass(frozen=True)
class SpanStart:
    """A span the workflow opens, as the worker's tracing is handed it."""

    name: str
    key: str
    """Its place in the run ("run", "step/3", "step/3/call/0"): with the run's
    ids it gives the span's id, the same on every replay."""
    workflow_id: str
    run_id: str
    start_ns: int
    attributes: Mapping[str, AttributeValue] = field(default_factory=dict)
    content: Mapping[str, str] = field(default_factory=dict)
    """Texts for capture_content (attribute -> text); dropped unless it is on."""


def span_id_of(workflow_id: str, run_id: str, key: str) -> int:
    """A 64-bit span id for `key` in one execution of a run (never 0, the invalid id)."""
    digest = hashlib.sha256(f"span\0{workflow_id}\0{run_id}\0{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big") or 1


def trace_id_of(workflow_id: str, run_id: str) -> int:
    """A 128-bit trace id for an execution that no caller's trace reached (never 0)."""
    digest = hashlib.sha256(f"trace\0{workflow_id}\0{run_id}".encode()).digest()
    return int.from_bytes(digest[:16], "big") or 1
