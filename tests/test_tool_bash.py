"""bash: output, the carried-over directory, exit codes, timeouts and isolation."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from tools.bash import NAME, SCHEMA, Bash, schema
from activities.tools.sandbox import ToolSandbox
from activities.workspace import Workspace
from agent_model.tool_io import ToolRequest, ToolResult
from testkit.e2e import live_processes

RUN = "run"

UNCONFINED = ToolSandbox.none()
"""Process handling itself is tested unconfined; tests/test_sandbox.py tests the sandbox."""


@pytest.fixture
def workspace(tmp_path: Path) -> Workspace:
    return Workspace(tmp_path / "root")


async def bash(tool: Bash, command: str, cwd: str | None = None) -> ToolResult:
    request = ToolRequest(workspace=RUN, arguments={"command": command}, cwd=cwd)
    return await ActivityEnvironment().run(tool.run, request)




def process_is_gone(pid: int) -> bool:
    """Gone, or a zombie (orphans go to PID 1, which may not reap them)."""
    try:
        return "State:\tZ" in Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True


def test_schema_states_the_timeout() -> None:
    assert SCHEMA["function"]["name"] == NAME
    assert SCHEMA["function"]["parameters"]["required"] == ["command"]
    assert "120 seconds" in SCHEMA["function"]["description"]
    assert "7 seconds" in schema(7)["function"]["description"]


@pytest.mark.asyncio
async def test_output_combines_stdout_and_stderr(workspace: Workspace) -> None:
    result = await bash(Bash(workspace, sandbox=UNCONFINED), "echo out; echo err >&2")
    assert result.output == "out\nerr\n"
    assert not result.error
    assert result.cwd == str(workspace.run_dir(RUN))


@pytest.mark.asyncio
async def test_current_directory_carries_over(workspace: Workspace) -> None:
    tool = Bash(workspace, sandbox=UNCONFINED)
    sub = workspace.run_dir(RUN) / "sub"
    first = await bash(tool, "mkdir sub && cd sub && pwd")
    assert first.output.strip() == str(sub)
    assert first.cwd == str(sub)
    second = await bash(tool, "pwd", cwd=first.cwd)
    assert second.output.strip() == str(sub)


@pytest.mark.asyncio
async def test_missing_directory_falls_back_to_run_dir(workspace: Workspace) -> None:
    result = await bash(Bash(workspace, sandbox=UNCONFINED), "pwd", cwd=str(workspace.run_dir(RUN) / "gone"))
    assert result.output.strip() == str(workspace.run_dir(RUN))


@pytest.mark.asyncio
async def test_exit_keeps_directory_and_reports_code(workspace: Workspace) -> None:
    (workspace.run_dir(RUN) / "sub").mkdir()
    result = await bash(Bash(workspace, sandbox=UNCONFINED), "cd sub; exit 3")
    assert result.error
    assert "Exit code: 3" in result.output
    assert result.cwd == str(workspace.run_dir(RUN) / "sub")


@pytest.mark.asyncio
async def test_no_output_is_stated(workspace: Workspace) -> None:
    result = await bash(Bash(workspace, sandbox=UNCONFINED), "true")
    assert result.output == "(no output)"
    assert not result.error


@pytest.mark.asyncio
async def test_timeout_kills_every_process_of_the_command(workspace: Workspace) -> None:
    run_dir = workspace.run_dir(RUN)
    command = "echo $$ > shell.pid; sleep 100 & echo $! > background.pid; echo waiting; sleep 100"
    started = time.monotonic()
    result = await bash(Bash(workspace, sandbox=UNCONFINED, timeout=1), command)
    assert time.monotonic() - started < 5
    assert result.error
    assert "waiting" in result.output
    assert "timed out after 1 s" in result.output
    shell = int((run_dir / "shell.pid").read_text())
    background = int((run_dir / "background.pid").read_text())
    deadline = time.monotonic() + 30  # a generous bound under load
    while live_processes("pgrp", shell) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert live_processes("pgrp", shell) == []
    assert process_is_gone(background)


@pytest.mark.asyncio
async def test_background_process_holding_output_does_not_block(workspace: Workspace) -> None:
    started = time.monotonic()
    result = await bash(Bash(workspace, sandbox=UNCONFINED, timeout=30), "sleep 30 & echo $! > sleep.pid; echo started")
    assert time.monotonic() - started < 5
    assert result.output == "started\n"
    os.kill(int((workspace.run_dir(RUN) / "sleep.pid").read_text()), 9)  # clean up the sleep


@pytest.mark.asyncio
async def test_worker_secrets_are_not_visible(workspace: Workspace, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-test")
    result = await bash(Bash(workspace, sandbox=UNCONFINED), 'env; echo "key=${OPENAI_API_KEY:-unset}"')
    assert "sk-secret-test" not in result.output
    assert "key=unset" in result.output
    assert f"HOME={workspace.run_dir(RUN)}" in result.output


@pytest.mark.asyncio
async def test_python_on_path_is_the_workers(workspace: Workspace) -> None:
    import sys

    result = await bash(Bash(workspace, sandbox=UNCONFINED), "python -c 'import sys; print(sys.executable)'")
    assert result.output.strip() == sys.executable


@pytest.mark.asyncio
async def test_missing_command_is_a_non_retryable_error(workspace: Workspace) -> None:
    with pytest.raises(ApplicationError) as raised:
        await ActivityEnvironment().run(Bash(workspace, sandbox=UNCONFINED).run, ToolRequest(workspace=RUN, arguments={}))
    assert raised.value.type == "BadToolArguments"
    assert raised.value.non_retryable
