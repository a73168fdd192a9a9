"""An MCP server given on the starter's command line (`python starter.py mcp
--command ...` or `--url ...`, as OpenManus's run_mcp.py takes it).

Such a server is not in any worker's mcp.json, and a workflow input must never
make a worker start a program. So the server goes into this starter's own
settings only, under the id "cli", and the run goes to a task queue of its own
that only this starter's in-process worker polls. The run is as durable as any
other while the starter runs; if the starter stops, the run waits on that
queue (for servers that outlive one command, use mcp.json).
"""

from __future__ import annotations

import uuid

from config.mcp_config import McpServerSettings, url_kind
from config.settings import Settings
from runtime.command_line import Run

AD_HOC_SERVER = "cli"


def with_ad_hoc_server(settings: Settings, command: Run) -> tuple[Settings, tuple[str, ...] | None]:
    """The settings for the command's run, and the MCP servers the run uses."""
    if command.mcp_command:
        server = McpServerSettings(kind="stdio", command=command.mcp_command[0], args=command.mcp_command[1:])
    elif command.mcp_url is not None:
        server = McpServerSettings(kind=url_kind(command.mcp_url), url=command.mcp_url)
    else:
        return settings, command.mcp_servers
    private = settings.model_copy(update={
        "task_queue": f"{settings.task_queue}-mcp-{uuid.uuid4().hex[:12]}",
        "mcp_servers": {**settings.mcp_servers, AD_HOC_SERVER: server},
    })
    return private, (*(command.mcp_servers or ()), AD_HOC_SERVER)
