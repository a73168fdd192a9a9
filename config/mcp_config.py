"""Reading config/mcp.json: the MCP servers a worker connects to.

The file is OpenManus's, accepted unchanged:
    {"mcpServers": {"<id>": {"type": "stdio", "command": "...", "args": [...], "env": {...}}
                            | {"type": "sse", "url": "..."}}}
plus streamable HTTP ("type": "http", "streamable-http" or "streamableHttp",
with "url") and "headers" for the HTTP kinds. Without "type", "command" means
stdio and "url" means SSE when its path ends in /sse, streamable HTTP
otherwise. Other keys (a client's own settings) are ignored, as OpenManus does.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field

from config import environment
from config.config_file import REPO_DIR, ConfigError, read_config_text

MCP_FILE_NAME = "mcp.json"
MCP_CONFIG_VARIABLE = "DURABLE_MANUS_MCP_CONFIG"
"""config/environment.py describes it."""

SERVER_ID = re.compile(r"[A-Za-z0-9_-]+")
"""Ids become part of function names (agent_model/mcp.py)."""
McpKind = Literal["stdio", "sse", "http"]
KINDS: dict[str, McpKind] = {
    "stdio": "stdio",
    "sse": "sse",
    "http": "http",
    "streamable-http": "http",
    "streamable_http": "http",
    "streamablehttp": "http",
}
"""Spellings of "type" (lower-cased) and the transport each means."""


class McpServerSettings(BaseModel):
    model_config = ConfigDict(frozen=True)

    kind: McpKind
    command: str | None = None
    args: tuple[str, ...] = ()
    env: dict[str, str] = Field(default_factory=dict, repr=False)
    """Added to the stdio server's clean environment (it may hold the server's keys)."""
    url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict, repr=False)
    """Sent with every HTTP request (e.g. Authorization)."""


def default_mcp_path(config_file: Path | None, env: Mapping[str, str] | None = None) -> Path | None:
    """Where mcp.json is: $DURABLE_MANUS_MCP_CONFIG, else next to the config
    file, else config/mcp.json in the repo; None when there is none."""
    named = environment.read(os.environ if env is None else env, MCP_CONFIG_VARIABLE)
    if named:
        return Path(named).expanduser()
    candidates = [config_file.parent / MCP_FILE_NAME] if config_file is not None else []
    candidates.append(REPO_DIR / "config" / MCP_FILE_NAME)
    return next((path for path in candidates if path.is_file()), None)


def load_mcp_servers(path: str | Path | None) -> dict[str, McpServerSettings]:
    """The servers of an mcp.json, by id; none without a file. A bad file is
    one ConfigError line naming the server and the field."""
    if path is None:
        return {}
    file = Path(path)
    try:
        data = json.loads(read_config_text(file, "MCP config file"))
    except (json.JSONDecodeError, RecursionError) as e:
        raise ConfigError(f"{file}: not valid JSON ({e})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{file}: must be a JSON object with mcpServers")
    servers = data.get("mcpServers", {})
    if not isinstance(servers, dict):
        raise ConfigError(f"{file}: mcpServers must be an object of servers by id")
    return {server_id: _server(file, server_id, raw) for server_id, raw in servers.items()}


def _server(file: Path, server_id: str, raw: Any) -> McpServerSettings:
    where = f"{file}: mcpServers.{server_id}"
    if not SERVER_ID.fullmatch(server_id):
        raise ConfigError(f"{file}: server id {server_id!r} may hold only letters, digits, _ and -")
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: must be an object")
    kind = _kind(where, raw)
    if kind == "stdio":
        command = raw.get("command")
        if not isinstance(command, str) or not command.strip():
            raise ConfigError(f"{where}: command must be a non-empty string (the server's executable)")
        return McpServerSettings(
            kind="stdio",
            command=command,
            args=tuple(_strings(where, "args", raw.get("args") or [])),
            env=_string_map(where, "env", raw.get("env") or {}),
        )
    url = raw.get("url")
    if not isinstance(url, str) or not is_http_url(url):
        raise ConfigError(f"{where}: url must be an http(s) URL, not {url!r}")
    return McpServerSettings(kind=kind, url=url, headers=_string_map(where, "headers", raw.get("headers") or {}))


def _kind(where: str, raw: dict[str, Any]) -> McpKind:
    given = raw.get("type")
    if given is None:
        if "command" in raw:
            return "stdio"
        if isinstance(raw.get("url"), str):
            return url_kind(raw["url"])
        raise ConfigError(f"{where}: type is missing and neither command nor url says which")
    kind = KINDS.get(given.lower()) if isinstance(given, str) else None
    if kind is None:
        raise ConfigError(f"{where}: type must be stdio, sse or http (streamable-http), not {given!r}")
    return kind


def _strings(where: str, field: str, value: Any) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ConfigError(f"{where}: {field} must be a list of strings")
    return value


def _string_map(where: str, field: str, value: Any) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise ConfigError(f"{where}: {field} must be an object of strings")
    return dict(value)


def url_kind(url: str) -> Literal["sse", "http"]:
    """The transport a server URL means when no type says: SSE when its path
    ends in /sse, streamable HTTP otherwise."""
    return "sse" if urlsplit(url).path.rstrip("/").endswith("/sse") else "http"


def is_http_url(url: str) -> bool:
    """An http(s) URL with a host."""
    try:
        parts = urlsplit(url)
        return parts.scheme in ("http", "https") and bool(parts.hostname)
    except ValueError:  # e.g. an unclosed [IPv6 host
        return False
