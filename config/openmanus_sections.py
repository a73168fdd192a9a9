"""OpenManus's config.toml tables that durable-manus accepts: which it uses
([runflow], [mcp] server_reference) and which it accepts without using, and why."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from config.config_file import ConfigError

OWN_SECTIONS = frozenset(
    {
        "llm", "workspace", "tools", "worker", "search", "web", "browser", "approval", "budget", "session", "encryption",
        "telemetry", "live",
    }
)
"""durable-manus's tables, each parsed by its model; OpenManus's others are in OPENMANUS_KEYS."""

OPENMANUS_KEYS: dict[str, frozenset[str]] = {
    "llm": frozenset(
        {"model", "base_url", "api_key", "max_tokens", "max_input_tokens", "temperature", "api_type", "api_version"}
    ),
    "browser": frozenset(
        {
            "headless", "disable_security", "extra_chromium_args", "chrome_instance_path",
            "wss_url", "cdp_url", "proxy", "max_content_length",
        }
    ),
    "search": frozenset({"engine", "fallback_engines", "retry_delay", "max_retries", "lang", "country"}),
    "sandbox": frozenset(
        {"use_sandbox", "image", "work_dir", "memory_limit", "cpu_limit", "timeout", "network_enabled"}
    ),
    "daytona": frozenset(
        {
            "daytona_api_key", "daytona_server_url", "daytona_target",
            "sandbox_image_name", "sandbox_entrypoint", "VNC_password",
        }
    ),
    "mcp": frozenset({"server_reference"}),
    "runflow": frozenset({"use_data_analysis_agent"}),
    "agent": frozenset({"max_steps"}),
}
"""Every section and key of OpenManus's config.toml (its app/config.py, early
2026; [agent] from its 2025 versions). A file written for OpenManus loads here;
a key outside this table and durable-manus's own fields is still an error."""

IGNORED_SECTIONS = {
    "sandbox": "it configures OpenManus's Docker sandbox; python_execute and bash run in "
    "durable-manus's bubblewrap sandbox, set in [tools]",
    "daytona": "durable-manus has no Daytona sandbox; tools run on the worker, confined as [tools] says",
    "agent": "durable-manus takes the step limit from each agent's profile or the starter's --max-steps",
}
"""OpenManus's sections that durable-manus accepts without using, and why."""

IGNORED_KEYS = {
    ("browser", "disable_security"): "the browser's page security is never turned off here",
}
"""OpenManus's keys in sections durable-manus uses that it does not use, and why."""

OPENMANUS_MCP_SERVER = "app.mcp.server"
"""OpenManus's own MCP server module, the default of [mcp] server_reference."""


def openmanus_sections(source: str, data: Mapping[str, Any], notes: list[str]) -> tuple[bool, str | None]:
    """[runflow] use_data_analysis_agent and [mcp] server_reference; notes for
    what is accepted and not used."""
    for name, section in data.items():
        if name in OWN_SECTIONS or name not in OPENMANUS_KEYS:
            continue  # durable-manus's own sections, and those parsed with their models
        if not isinstance(section, Mapping):
            raise ConfigError(f"{source}: [{name}] must be a table")
        unknown = set(section) - OPENMANUS_KEYS[name]
        if unknown:
            raise ConfigError(
                f"{source}: [{name}] has no key {sorted(unknown)[0]!r} "
                f"(its keys: {', '.join(sorted(OPENMANUS_KEYS[name]))})"
            )
        if name in IGNORED_SECTIONS:
            notes.append(f"[{name}] is ignored: {IGNORED_SECTIONS[name]}")
    for (name, key), why in IGNORED_KEYS.items():
        section = data.get(name)
        if isinstance(section, Mapping) and key in section:
            notes.append(f"[{name}] {key} is ignored: {why}")

    data_analysis = data.get("runflow", {}).get("use_data_analysis_agent", False)
    if not isinstance(data_analysis, bool):
        raise ConfigError(f"{source}: [runflow] use_data_analysis_agent must be true or false, not {data_analysis!r}")
    reference = data.get("mcp", {}).get("server_reference")
    if reference is not None and (not isinstance(reference, str) or not reference.strip()):
        raise ConfigError(f"{source}: [mcp] server_reference must be a Python module name, not {reference!r}")
    if reference == OPENMANUS_MCP_SERVER:
        notes.append(
            f"[mcp] server_reference {OPENMANUS_MCP_SERVER} is ignored: it is OpenManus's own tool server, "
            "which durable-manus does not have"
        )
        reference = None
    return data_analysis, reference
