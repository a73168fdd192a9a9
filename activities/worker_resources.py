"""What a worker hands the tools it runs (agent_model/tool_spec.py Needs):
built once at worker start, given to each tool file's `build`."""

from __future__ import annotations

from dataclasses import dataclass

from activities.tools.sandbox import ToolSandbox
from activities.workspace import Workspace


@dataclass(frozen=True)
class WorkerResources:
    workspace: Workspace
    """Needs.WORKSPACE and Needs.FILES: the run directories under the workspace root."""
    sandbox: ToolSandbox
    """Needs.PROCESSES: how tool processes are confined on this worker."""
