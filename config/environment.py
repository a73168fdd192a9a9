"""Every environment variable the configuration reads, in one table.

A variable either overrides (or, marked `fills_in`, supplies when the file
leaves it out) a key of the config file, and is then checked by that key's
model like the file's value, or it is a setting of its own. An empty variable
counts as unset (Compose passes an unset host variable through as empty).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from config.config_file import ConfigError

Parser = Callable[[str], Any]
"""Text of the variable -> its value; ValueError with what is wrong, worded
to follow the variable's name."""


def text(value: str) -> str:
    """A name, key or URL: one line, no surrounding spaces."""
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise ValueError("must not contain control characters (a newline, a tab, ...)")
    if value != value.strip():
        raise ValueError("must not begin or end with spaces")
    return value


def path(value: str) -> str:
    if any(ord(c) < 32 for c in value):
        raise ValueError("must be a path without control characters (a newline, NUL, ...)")
    return value


def flag(value: str) -> Any:
    """1/true/0/false (any case); anything else is passed on for the key's model to refuse."""
    return {"1": True, "true": True, "0": False, "false": False}.get(value.strip().lower(), value)


HEADER_NAME_CHARS = frozenset("!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
HEADER_VALUE_REFUSED = frozenset('",;\\')


def headers(value: str) -> str:
    """OTLP exporter headers, name=value pairs separated by commas. Checked
    here because the exporter logs an entry it cannot read, key and all."""
    for entry in value.split(","):
        name, equals, content = entry.strip(" ").partition("=")
        readable = (
            equals
            and name.strip()
            and set(name.strip()) <= HEADER_NAME_CHARS
            and all(" " <= c <= "~" and c not in HEADER_VALUE_REFUSED for c in content)
        )
        if not readable:
            raise ValueError("must be name=value pairs separated by commas, values URL-encoded (the value is not shown)")
    return value


def port(value: str) -> int:
    if not value.isdigit() or not 0 < int(value) < 65536:
        raise ValueError(f"must be a TCP port number from 1 to 65535, not {value!r}")
    return int(value)


def token(value: str) -> str:
    """A bearer token: long enough not to be guessed, and sendable in a header."""
    if len(value) < 32 or not value.isascii() or not value.isprintable() or " " in value:
        raise ValueError("must be at least 32 printable ASCII characters without spaces")
    return value


def seconds(low: float, high: float) -> Parser:
    def parse(value: str) -> float:
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        if not low <= number <= high:
            raise ValueError(f"must be a number of seconds from {low:g} to {high:g}, not {value!r}")
        return number

    return parse


@dataclass(frozen=True)
class Variable:
    name: str
    setting: str
    """What it sets: "[llm] api_key" for a key of the file, else the Settings field."""
    parse: Parser
    meaning: str
    key: tuple[str, str] | None = None
    """(table, key) of the config file it overrides; None: a setting of its own."""
    fills_in: bool = False
    """Used only when the file leaves the key out (the file wins)."""
    secret: bool = False
    """Never repeated in a message."""


VARIABLES: tuple[Variable, ...] = (
    Variable("DURABLE_MANUS_CONFIG", "config file", path, "the config file to read (else config/config.toml if it exists)"),
    Variable("DURABLE_MANUS_MCP_CONFIG", "mcp.json", path, "the MCP servers file (else mcp.json beside the config file, else config/mcp.json)"),
    Variable("OPENAI_API_KEY", "[llm] api_key", text, "the LLM's API key", key=("llm", "api_key"), secret=True),
    Variable("OPENAI_BASE_URL", "[llm] base_url", text, "the LLM's endpoint", key=("llm", "base_url")),
    Variable("OPENAI_MODEL", "[llm] model", text, "the LLM's model", key=("llm", "model")),
    Variable("OPENAI_API_VERSION", "[llm] api_version", text, "azure's API version", key=("llm", "api_version"), fills_in=True),
    Variable("WORKSPACE_ROOT", "[workspace] root", path, "where the runs' directories are", key=("workspace", "root")),
    Variable("DURABLE_MANUS_TOOL_SANDBOX", "[tools] sandbox", text, "confinement of tool processes: auto, bwrap or none", key=("tools", "sandbox")),
    Variable("DURABLE_MANUS_TOOL_NETWORK", "[tools] network", text, "what tool code may connect to: none or internet", key=("tools", "network")),
    Variable("DURABLE_MANUS_WORKFLOW_SANDBOX", "[worker] workflow_sandbox", flag, "run workflow code in Temporal's sandbox: 1/true or 0/false", key=("worker", "workflow_sandbox")),
    Variable("DURABLE_MANUS_DEPLOYMENT_NAME", "[worker] deployment_name", text, "Worker Deployment Versioning: the deployment", key=("worker", "deployment_name")),
    Variable("DURABLE_MANUS_BUILD_ID", "[worker] build_id", text, "Worker Deployment Versioning: this worker's build", key=("worker", "build_id")),
    Variable("BRAVE_API_KEY", "[search] brave_api_key", text, "web_search's Brave key", key=("search", "brave_api_key"), secret=True),
    Variable("TAVILY_API_KEY", "[search] tavily_api_key", text, "web_search's Tavily key", key=("search", "tavily_api_key"), secret=True),
    Variable("DURABLE_MANUS_SESSION_IDLE_MINUTES", "[session] idle_minutes", text, "minutes a chat session waits for the next message before it ends (default 30)", key=("session", "idle_minutes")),
    Variable("DURABLE_MANUS_ENCRYPTION_KEY_FILE", "[encryption] key_file", path, "the payload key file: with it every payload sent to Temporal is encrypted (python starter.py keygen PATH makes one)", key=("encryption", "key_file")),
    Variable("OTEL_EXPORTER_OTLP_ENDPOINT", "[telemetry] otlp_endpoint", text, "the OTLP/HTTP endpoint the worker sends its spans to (unset: no tracing)", key=("telemetry", "otlp_endpoint")),
    Variable("OTEL_SERVICE_NAME", "[telemetry] service_name", text, "the service name of the worker's spans (default durable-manus)", key=("telemetry", "service_name")),
    Variable("OTEL_EXPORTER_OTLP_HEADERS", "the trace exporter's headers", headers, "headers of every span export, e.g. Authorization=Basic ... for Langfuse (secret: read by the OpenTelemetry exporter, never printed)", secret=True),
    Variable("OTEL_SDK_DISABLED", "[telemetry] disabled", flag, "true: no tracing, whatever the endpoint", key=("telemetry", "disabled")),
    Variable("DURABLE_MANUS_LIVE_STREAM", "[live] stream", flag, "the worker streams each think and writes its tokens to the live journal: 1/true or 0/false", key=("live", "stream")),
    Variable("DURABLE_MANUS_LIVE_PRINT", "[live] print", flag, "the starter shows a followed run's streamed thought on a terminal: 1/true or 0/false", key=("live", "print")),
    Variable("TEMPORAL_TASK_QUEUE", "task_queue", text, "the task queue workers poll and runs start on (default durable-manus)"),
    Variable("DURABLE_MANUS_SERVER_WAIT", "server_wait_seconds", seconds(1, 3600), "seconds a following starter waits for a Temporal server that stopped answering (default 60)"),
    Variable("DURABLE_MANUS_PICKUP_WAIT", "pickup_wait_seconds", seconds(0.5, 600), "seconds a detached start waits to see a worker take the run (default 3)"),
    Variable("DURABLE_MANUS_UI_PORT", "the embedded server's Web UI port", port, "the port of the embedded Temporal server's Web UI (default 8233)"),
    Variable("DURABLE_MANUS_TEMPORAL_CLI", "the embedded server's temporal CLI", path, "the `temporal` CLI that starts the embedded server (default: beside this Python, else on PATH)"),
    Variable("DURABLE_MANUS_WORKER_IDLE_EXIT", "the starter's worker's idle exit", seconds(0, 86400), "seconds the worker a starter starts for its runs (detached: it outlives the starter) stays once no run is open on its task queue (default 300); 0: the starter runs its worker in its own process, and it stops with the command"),
    Variable("DURABLE_MANUS_CODEC_TOKEN", "the codec server's token", token, "the bearer token the codec server requires (default: made once in .data/codec-token)", secret=True),
    Variable("DURABLE_MANUS_QUERY_WAIT", "run control's query wait", seconds(0.5, 600), "seconds show, answer and the other run commands wait for a worker to answer a query (default 10)"),
)
BY_NAME = {variable.name: variable for variable in VARIABLES}


def read(env: Mapping[str, str], name: str) -> Any:
    """The parsed value of variable `name`, None when unset or empty."""
    variable = BY_NAME[name]
    raw = env.get(name)
    if not raw:
        return None
    try:
        return variable.parse(raw)
    except ValueError as e:
        problem = str(e).replace(repr(raw), "(value not shown)") if variable.secret else str(e)
        raise ConfigError(f"{name} {problem}") from None


def apply_to_file(data: dict[str, Any], env: Mapping[str, str]) -> dict[tuple[str, str], str]:
    """Puts the set variables into the file's tables, as the file's own keys;
    returns (table, key) -> the variable each came from."""
    origins: dict[tuple[str, str], str] = {}
    for variable in VARIABLES:
        if variable.key is None:
            continue
        value = read(env, variable.name)
        if value is None:
            continue
        section, key = variable.key
        current = data.setdefault(section, {})
        if not isinstance(current, dict):
            continue  # not a table: its parser says so
        if variable.fills_in and key in current:
            continue
        current[key] = value
        origins[(section, key)] = variable.name
    return origins


def origins_in(origins: Mapping[tuple[str, str], str], section: str) -> dict[str, str]:
    """The keys of one table that came from the environment: key -> variable."""
    return {key: name for (table, key), name in origins.items() if table == section}
