"""The bash tool: run a shell command in the run's directory.

The command runs in the tool sandbox (activities/tools/sandbox.py) with a clean
environment, resource limits and a timeout that kills every process it started.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict
from temporalio import activity

from agent_model.tool_arguments import required_string
from agent_model.tool_io import ToolRequest, ToolResult
from agent_model.tool_spec import TOOL_HEARTBEAT, TOOL_RETRIES_AFTER_A_LOST_WORKER, WAIT_FOR_THE_CALL, Timeout, activity_config
from agent_model.tool_spec import ToolSpec, ToolState, first_line_of

if TYPE_CHECKING:  # worker side; imported when the worker builds the activity
    from activities.worker_resources import WorkerResources
    from activities.workspace import Workspace

NAME = "bash"

DEFAULT_TIMEOUT = 120.0
"""Seconds a command may run before it and its children are killed."""


def schema(timeout: float = DEFAULT_TIMEOUT) -> dict:
    """The tool definition, stating the timeout the worker actually applies."""
    return {
        "type": "function",
        "function": {
            "name": NAME,
            "description": (
                "Run a bash command in the run's working directory and get back "
                "its combined stdout and stderr. Every call starts a fresh shell "
                "(variables and functions do not persist), but the current "
                "directory carries over: after `cd dir`, the next call starts in "
                "dir. Programs started in the background end when the command "
                "returns, so start a server, use it and stop it in one command. "
                f"A command is killed, along with everything it started, after "
                f"{timeout:g} seconds."
            ),
            "parameters": {
                "type": "object",
                "properties": {
                    "command": {
                        "type": "string",
                        "description": "The bash command(s) to run.",
                    },
                },
                "required": ["command"],
            },
        },
    }


SCHEMA = schema()

CONFIG = activity_config(
    start_to_close=Timeout(240, "must outlast the command's own timeout (120 s) plus start-up and kill"),
    heartbeat=TOOL_HEARTBEAT,
    cancellation=WAIT_FOR_THE_CALL,
    retries=TOOL_RETRIES_AFTER_A_LOST_WORKER,
)


class ShellState(BaseModel):
    """bash's slot in the run: the directory the last command ended in."""

    model_config = ConfigDict(frozen=True)

    cwd: str | None = None
    """None: the run's directory."""


def _with_shell_dir(shell: ShellState, request: ToolRequest) -> ToolRequest:
    return request.model_copy(update={"cwd": shell.cwd})


def _after_command(shell: ShellState, result: ToolResult) -> ShellState:
    return ShellState(cwd=result.cwd) if result.cwd else shell


class Bash:
    def __init__(self, workspace: Workspace, timeout: float = DEFAULT_TIMEOUT, **options) -> None:
        """timeout: seconds per command (default 120); options: see ProcessTool."""
        from activities.tools.process import ProcessTool

        self.workspace = workspace
        self.processes = ProcessTool(workspace, timeout, **options)

    @activity.defn(name=NAME)
    async def run(self, request: ToolRequest) -> ToolResult:
        from activities.tools.process import read_report

        command = required_string(request.arguments, "command", NAME)
        refused = self.processes.refused()
        if refused:
            return refused
        run_dir = self.workspace.run_dir(request.workspace)
        start_dir = _start_dir(request.cwd, run_dir)
        # The final directory comes back through a pipe, not a file: the worker
        # then never opens a path that the command could have swapped.
        report_read, report_write = os.pipe()
        try:
            try:
                outcome = await self.processes.run_process(
                    ["bash", "--noprofile", "--norc", "-c", _with_cwd_report(command, report_write)],
                    run_name=request.workspace,
                    cwd=start_dir,
                    report_fd=report_write,
                )
            finally:
                os.close(report_write)
            end_dir = _end_dir(read_report(report_read), run_dir) or str(start_dir)
        finally:
            os.close(report_read)
        return self.processes.result(outcome, "(no output)", cwd=end_dir)


def build(resources: WorkerResources):
    return Bash(resources.workspace, sandbox=resources.sandbox).run


SPEC = ToolSpec(
    name=NAME,
    schema=SCHEMA,
    summary=first_line_of("command"),
    activity=CONFIG,
    state=ToolState(model=ShellState, into_request=_with_shell_dir, from_result=_after_command),
    changes_files=True,
    build=build,
)


def _start_dir(requested: str | None, run_dir: Path) -> Path:
    """The carried-over directory if it is inside the run directory and still
    exists there, else the run directory."""
    if requested:
        candidate = Path(os.path.normpath(run_dir / requested))  # an absolute `requested` replaces run_dir
        if _inside(candidate, run_dir) and candidate.is_dir():
            return candidate
    return run_dir


def _with_cwd_report(command: str, report_fd: int) -> str:
    """The command, preceded by an EXIT trap that writes the final directory to
    the report descriptor. The trap also runs when the command calls `exit`; it
    does not run if the shell is killed or the command replaces the trap or the
    shell (`exec`)."""
    report = f'builtin printf "%s" "$PWD" >&{report_fd}'
    return f"trap {shlex.quote(report)} EXIT\n{command}"


def _end_dir(report: bytes, run_dir: Path) -> str | None:
    """The reported directory when it is a plausible one inside the run
    directory; the command controls the report, so anything else is dropped."""
    try:
        text = report.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if not text.startswith("/") or "\0" in text or "\n" in text:
        return None
    path = Path(os.path.normpath(text))
    return str(path) if _inside(path, run_dir) else None


def _inside(path: Path, directory: Path) -> bool:
    return path == directory or directory in path.parents
