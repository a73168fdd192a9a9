"""The python_execute tool: run model-written Python in a separate, limited process."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict
from temporalio import activity

from agent_model.tool_arguments import required_string
from agent_model.tool_io import ToolRequest, ToolResult
from agent_model.tool_spec import TOOL_HEARTBEAT, TOOL_RETRIES_AFTER_A_LOST_WORKER, WAIT_FOR_THE_CALL, Timeout, activity_config
from agent_model.tool_spec import ToolSpec, first_line_of

if TYPE_CHECKING:  # worker side; imported when the worker builds the activity
    from activities.tools.run_sandbox import KernelNews
    from activities.worker_resources import WorkerResources
    from activities.workspace import Workspace

NAME = "python_execute"

FRESH_DESCRIPTION = (
    "Run a Python program in a fresh interpreter whose working directory is "
    "the run's directory. You only get back what the program writes to "
    "stdout and stderr, so print() every value you want to see; the value "
    "of the last expression is not shown. Variables do not survive between "
    "calls: save anything you need later to a file."
)
KEPT_DESCRIPTION = (
    "Run Python code in this run's Python session, whose working directory is "
    "the run's directory. Like a notebook: variables, imports and functions "
    "from earlier calls are still there, so build on them instead of "
    "recomputing. You only get back what the code writes to stdout and "
    "stderr, so print() every value you want to see. If the session had to "
    "restart you are told so: files in the run's directory survive that, "
    "variables do not."
)


class PythonOptions(BaseModel):
    """What a profile may choose for python_execute (AgentProfile.tool_options)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    keep_state: bool = False
    """One Python per run whose variables survive between calls (data analysis)."""


def schema(options: PythonOptions = PythonOptions()) -> dict:
    return {
        "type": "function",
        "function": {
            "name": NAME,
            "description": KEPT_DESCRIPTION if options.keep_state else FRESH_DESCRIPTION,
            "parameters": {
                "type": "object",
                "properties": {
                    "code": {
                        "type": "string",
                        "description": (
                            "The Python code to run in the session." if options.keep_state
                            else "The complete Python source code to run."
                        ),
                    },
                },
                "required": ["code"],
            },
        },
    }


SCHEMA = schema()

CONFIG = activity_config(
    start_to_close=Timeout(
        120,
        "must outlast the tool's own timeout (30 s) plus start-up and kill; that timeout, not this "
        "one, normally ends a runaway program",
    ),
    heartbeat=TOOL_HEARTBEAT,
    cancellation=WAIT_FOR_THE_CALL,
    retries=TOOL_RETRIES_AFTER_A_LOST_WORKER,
)


STATE_LOST_NOTE = (
    "Note: the Python session restarted before this call ({why}), so variables, imports and "
    "functions of earlier calls are gone; files in the run's directory are kept."
)
STATE_ENDED_NOTE = "Note: the Python session ended with this call ({why}); the next call starts a fresh one."
NO_SESSION_NOTE = (
    "Note: this worker runs each python_execute call in a fresh interpreter, so variables do not "
    "survive between calls; save what you need to a file."
)
KERNEL_MARK = "python-session"
"""In the run's history directory (the worker's, shared by a cluster's workers):
there the run had a session whose variables a later call could expect."""


class PythonExecute:
    def __init__(self, workspace: Workspace, timeout: float = 30.0, **options) -> None:
        """timeout: seconds before the program is killed (default 30); options:
        see ProcessTool."""
        from activities.tools.process import ProcessTool

        self.workspace = workspace
        self.processes = ProcessTool(workspace, timeout, **options)

    @activity.defn(name=NAME)
    async def run(self, request: ToolRequest) -> ToolResult:
        from activities.tools.run_sandbox import kernel_source

        code = required_string(request.arguments, "code", NAME)
        refused = self.processes.refused()
        if refused:
            return refused
        keep_state = request.options.get("keep_state") is True
        outcome = await self.processes.run_process(
            # -E -s: ignore PYTHON* variables and user site-packages, but keep the
            #     run directory on sys.path so the agent can import its own
            #     modules (which -I would forbid).
            # -u: unbuffered, so output is in order and survives a kill.
            [sys.executable, "-E", "-s", "-u", "-"],
            run_name=request.workspace,
            stdin=code.encode("utf-8", "surrogatepass"),
            kernel_argv=[sys.executable, "-E", "-s", "-u", "-c", kernel_source()] if keep_state else None,
        )
        result = self.processes.result(outcome, "The code ran and printed nothing (use print() to see values).")
        if not keep_state:
            return result
        before, after = self._session_notes(request.workspace, outcome.kernel)
        text = "\n".join(part for part in (before, result.output, after) if part)
        return result.model_copy(update={"output": text})

    def _session_notes(self, run_name: str, kernel: KernelNews | None) -> tuple[str | None, str | None]:
        """What the model must know of its session, before and after the output."""
        if kernel is None:
            return NO_SESSION_NOTE, None
        mark = self.workspace.history_dir(run_name) / KERNEL_MARK
        before = None
        if kernel.fresh and mark.exists():
            before = STATE_LOST_NOTE.format(why="its sandbox ended: the worker restarted, or the run was idle too long")
        if kernel.ended is not None:
            mark.unlink(missing_ok=True)
            return before, STATE_ENDED_NOTE.format(why=kernel.ended)
        mark.touch()
        return before, None


def build(resources: WorkerResources):
    return PythonExecute(resources.workspace, sandbox=resources.sandbox).run


SPEC = ToolSpec(
    name=NAME,
    schema=SCHEMA,
    options=PythonOptions,
    schema_for=schema,
    summary=first_line_of("code"),
    activity=CONFIG,
    changes_files=True,
    build=build,
)
