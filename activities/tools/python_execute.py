"""The python_execute tool: run model-written Python in a separate, limited process."""

from __future__ import annotations

import sys
from datetime import timedelta

from temporalio import activity
from temporalio.common import RetryPolicy

from agent_model.tool_io import ToolRequest, ToolResult
from activities.tools.process import TOOL_HEARTBEAT_TIMEOUT, TOOL_RETRY_INTERVAL, ProcessTool, required_string
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

OPTIONS: dict = {
    # Must outlast the tool's own timeout (default 30 s) plus start-up and
    # kill; the tool's timeout, not this one, normally ends a runaway program.
    "start_to_close_timeout": timedelta(minutes=2),
    # run_limited heartbeats every second: 4 s of silence means a dead worker
    # (process.TOOL_HEARTBEAT_TIMEOUT says why 4 s, and why the lease is shorter).
    "heartbeat_timeout": TOOL_HEARTBEAT_TIMEOUT,
    "retry_policy": RetryPolicy(
        # The shortest wait the server makes (process.TOOL_RETRY_INTERVAL).
        initial_interval=TOOL_RETRY_INTERVAL,
        # Program failures come back as results, so a retry only follows a lost
        # worker; the program then runs again, which is the lesser evil.
        maximum_attempts=3,
        # Malformed arguments fail the same way every time.
        non_retryable_error_types=["BadToolArguments"],
    ),
}


class PythonExecute(ProcessTool):
    def __init__(self, workspace: Workspace, timeout: float = 30.0, **options) -> None:
        """timeout: seconds before the program is killed (default 30); options:
        see ProcessTool."""
        super().__init__(workspace, timeout, **options)

    @activity.defn(name=NAME)
    async def run(self, request: ToolRequest) -> ToolResult:
        code = required_string(request.arguments, "code", NAME)
        refused = self.refused()
        if refused:
            return refused
        outcome = await self.run_process(
            # -E -s: ignore PYTHON* variables and user site-packages, but keep the
            #     run directory on sys.path so the agent can import its own
            #     modules (which -I would forbid).
            # -u: unbuffered, so output is in order and survives a kill.
            [sys.executable, "-E", "-s", "-u", "-"],
            run_name=request.workspace,
            stdin=code.encode("utf-8", "surrogatepass"),
        )
        return self.result(outcome, "The code ran and printed nothing (use print() to see values).")
