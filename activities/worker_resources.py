"""What a worker hands the tools it runs: built once at worker start, given to
each tool file's `build` (agent_model/tool_spec.py ToolSpec)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from activities.charts.packages import AnalysisPackages
from activities.tools.sandbox import ToolSandbox
from activities.web.access import WebAccess
from activities.workspace import Workspace
from config.settings import SearchSettings, WebSettings

if TYPE_CHECKING:
    from activities.browser.sessions import BrowserSessions
    from activities.mcp.pool import McpPool


@dataclass(frozen=True)
class WorkerResources:
    workspace: Workspace
    """The run directories under the workspace root."""
    sandbox: ToolSandbox
    """How tool processes are confined on this worker."""
    web: WebSettings = field(default_factory=WebSettings)
    """The bounds of web_fetch and web_search ([web])."""
    search: SearchSettings = field(default_factory=SearchSettings)
    """The engine chain and its keys ([search])."""
    web_access: WebAccess = field(default_factory=WebAccess)
    """HTTP to addresses the rules allow (public ones, [web] allow),
    never to the LLM or Temporal endpoints."""
    mcp_pool: McpPool | None = None
    """The MCP servers of the worker's mcp.json: one connection each, stdio
    servers as its child processes (None: the mcp package is missing)."""
    browser_sessions: BrowserSessions | None = None
    """This worker's browsers, one per run (None: no browser here)."""
    packages: AnalysisPackages = field(default_factory=AnalysisPackages.detect)
    """numpy, pandas and matplotlib in the sandbox's Python (the chart tool needs them)."""
    vision: bool = False
    """The worker has an `[llm.vision]` model: charts are shown to it as images."""
