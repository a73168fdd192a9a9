"""What a worker says about its configuration: which files it read and what
they enable, at start; and, while it runs, that one of them changed.

A worker reads its config once. Runs carry what decides their commands in
their input (profiles, budgets, gates), and an LLM key or endpoint read
mid-run would make two attempts of one think differ; so a changed file is
not reloaded: the worker says, once per file, that a restart applies it.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from config.mcp_config import default_mcp_path
from config.settings import Settings

log = logging.getLogger("durable_manus.config")

CHECK_SECONDS = 5.0
"""How often a running worker looks at its config files' modification times."""


def mcp_file(settings: Settings) -> Path | None:
    """The mcp.json these settings were read with, if any."""
    return default_mcp_path(settings.config_file)


def config_lines(settings: Settings) -> list[str]:
    """The lines a worker logs at start: the files read, then what they enable."""
    config = settings.config_file
    mcp = mcp_file(settings)
    read = f"config: {config}" if config else "config: no config file (config/config.toml is absent); the environment only"
    read += f"; MCP servers: {mcp}" if mcp else "; no mcp.json"
    default = settings.llm["default"]
    profiles = ", ".join(sorted(name for name in settings.llm if name != "default"))
    llm = f"LLM {default.model} at {default.endpoint} ({default.api_type})"
    if profiles:
        llm += f", profiles {profiles}"
    servers = ", ".join(sorted(settings.mcp_servers)) or "none"
    key_file = settings.encryption.key_path
    payloads = f"payloads encrypted (key file {key_file})" if key_file else "payloads not encrypted"
    enables = (
        f"config enables: {llm}; web_search {' > '.join(settings.search.chain)}; tools sandbox {settings.tool_sandbox}, "
        f"network {settings.tool_network}; approval {settings.approval.mode.value}; MCP servers: {servers}; {payloads}"
    )
    return [read, enables]


@dataclass
class ConfigWatch:
    """The config files' modification times as the worker read them; a change is told once per file."""

    files: dict[Path, float | None] = field(default_factory=dict)
    told: set[Path] = field(default_factory=set)

    @classmethod
    def of(cls, settings: Settings) -> ConfigWatch:
        """The config file, mcp.json, and the payload key file (a rotation reaches a worker when it restarts)."""
        files = (settings.config_file, mcp_file(settings), settings.encryption.key_path)
        paths = [path for path in files if path is not None]
        return cls({path: _mtime(path) for path in paths})

    def changed(self) -> list[Path]:
        """Files changed since they were read, not told before."""
        news = [path for path, seen in self.files.items() if path not in self.told and _mtime(path) != seen]
        self.told.update(news)
        return news


def _mtime(path: Path) -> float | None:
    try:
        return os.stat(path).st_mtime_ns / 1e9
    except OSError:
        return None


def changed_line(path: Path) -> str:
    return (
        f"config: {path} changed after this worker read it; restart the worker to use it "
        "(until then it runs with what it read at start)"
    )


async def watch_config(watch: ConfigWatch, say: Callable[[str], None] = log.warning, every: float = CHECK_SECONDS) -> None:
    """Until cancelled: say, once per file, that a config file changed."""
    while True:
        await asyncio.sleep(every)
        for path in await asyncio.to_thread(watch.changed):
            say(changed_line(path))
