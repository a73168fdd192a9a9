"""The python_execute tool: run model-written Python in a separate, limited process."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from temporalio import activity

from agent_model.tool_arguments import required_string
from agent_model.tool_io import ToolRequest, ToolResult
from agent_model.tool_spec import TOOL_HEARTBEAT, TOOL_RETRIES_AFTER_A_LOST_WORKER, WAIT_FOR_THE_CALL, Timeout, activity_config
from agent_model.tool_spec import ToolSpec, first_line_of

if TYPE_CHECKING:  # worker side; imported when the worker builds the activity
    from activities.worker_resources import WorkerResources
    from activities.workspace import Workspace

NAME = "python_execute"

SCHEMA = {
    "type": "function",
    "function": {
        "name": NAME,
        "description": (
            "Run a Python program in a fresh interpreter whose working directory is "
            "the run's directory. You only get back what the program writes to "
            "stdout and stderr, so print() every value you want to see; the value "
            "of the last expression is not shown. Variables do not survive between "
            "calls: save anything you need later to a file."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "code": {
                    "type": "string",
                    "description": "The complete Python source code to run.",
                },
            },
            "required": ["code"],
        },
    },
}

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


class PythonExecute:
    def __init__(self, workspace: Workspace, timeout: float = 30.0, **options) -> None:
        """timeout: seconds before the program is killed (default 30); options:
        see ProcessTool."""
        from activities.tools.process import ProcessTool

        self.processes = ProcessTool(workspace, timeout, **options)

    @activity.defn(name=NAME)
    async def run(self, request: ToolRequest) -> ToolResult:
        code = required_string(request.arguments, "code", NAME)
        refused = self.processes.refused()
        if refused:
            return refused
        outcome = await self.processes.run_process(
            # -E -s: ignore PYTHON* variables and user site-packages, but keep the
            #     run directory on sys.path so the agent can import its own
            #     modules (which -I would forbid).
            # -u: unbuffered, so output is in order and survives a kill.
            [sys.executable, "-E", "-s", "-u", "-"],
            run_name=request.workspace,
            stdin=code.encode("utf-8", "surrogatepass"),
        )
        return self.processes.result(outcome, "The code ran and printed nothing (use print() to see values).")


def build(resources: WorkerResources):
    return PythonExecute(resources.workspace, sandbox=resources.sandbox).run


SPEC = ToolSpec(
    name=NAME,
    schema=SCHEMA,
    summary=first_line_of("code"),
    activity=CONFIG,
    changes_files=True,
    build=build,
)
