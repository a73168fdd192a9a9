"""python_execute: output, failures, timeouts, cancellation and isolation."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import resource
import time
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from tools.python_execute import NAME, SCHEMA, PythonExecute
from activities.tools.sandbox import ToolSandbox
from activities.workspace import Workspace
from agent_model.tool_io import ToolRequest, ToolResult

RUN = "run"

UNCONFINED = ToolSandbox.none()
"""Process handling itself is tested unconfined; tests/test_sandbox.py tests the sandbox."""


@pytest.fixture
def workspace(tmp_path: Path) -> Workspace:
    return Workspace(tmp_path / "root")


async def execute(tool: PythonExecute, code: str) -> ToolResult:
    return await ActivityEnvironment().run(tool.run, ToolRequest(workspace=RUN, arguments={"code": code}))


def process_is_gone(pid: int) -> bool:
    """True if the process no longer exists or is a zombie waiting to be reaped
    (orphans are reparented to PID 1, which may not reap them)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True
    return "State:\tZ" in status


async def wait_until_gone(pid: int, seconds: float = 3.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process_is_gone(pid):
            return True
        await asyncio.sleep(0.05)
    return process_is_gone(pid)


async def read_pid(path: Path, seconds: float = 5.0) -> int:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return int(path.read_text())
        await asyncio.sleep(0.05)
    raise AssertionError(f"{path} was never written")


def test_schema_shape() -> None:
    function = SCHEMA["function"]
    assert SCHEMA["type"] == "function" and function["name"] == NAME
    assert function["parameters"]["required"] == ["code"]


@pytest.mark.asyncio
async def test_printed_output_is_returned(workspace: Workspace) -> None:
    result = await execute(PythonExecute(workspace, sandbox=UNCONFINED), "print(17*23)")
    assert result == ToolResult(output="391\n")


@pytest.mark.asyncio
async def test_runs_in_the_run_directory(workspace: Workspace) -> None:
    code = "import os; print(os.getcwd()); open('made.txt', 'w').write('x')"
    result = await execute(PythonExecute(workspace, sandbox=UNCONFINED), code)
    assert result.output.strip() == str(workspace.run_dir(RUN))
    assert (workspace.run_dir(RUN) / "made.txt").read_text() == "x"


@pytest.mark.asyncio
async def test_silent_code_says_so(workspace: Workspace) -> None:
    result = await execute(PythonExecute(workspace, sandbox=UNCONFINED), "x = 1")
    assert not result.error
    assert "printed nothing" in result.output


@pytest.mark.asyncio
async def test_exception_is_an_error_with_traceback(workspace: Workspace) -> None:
    result = await execute(PythonExecute(workspace, sandbox=UNCONFINED), "print('before')\nraise ValueError('boom')")
    assert result.error
    assert result.output.startswith("before\n")
    assert "Traceback (most recent call last)" in result.output
    assert "ValueError: boom" in result.output


@pytest.mark.asyncio
async def test_long_output_is_clipped_at_both_ends_kept(workspace: Workspace) -> None:
    code = "print('START'); print('x' * 100000); print('END')"
    result = await execute(PythonExecute(workspace, sandbox=UNCONFINED, max_output=1000), code)
    assert result.output.startswith("START")
    assert result.output.rstrip().endswith("END")
    assert "characters cut" in result.output
    assert len(result.output) < 1100


@pytest.mark.asyncio
async def test_timeout_kills_the_program_and_its_children(workspace: Workspace) -> None:
    code = (
        "import subprocess, time\n"
        "child = subprocess.Popen(['sleep', '100'])\n"
        "open('child.pid', 'w').write(str(child.pid))\n"
        "print('started', flush=True)\n"
        "while True: pass\n"
    )
    started = time.monotonic()
    result = await execute(PythonExecute(workspace, sandbox=UNCONFINED, timeout=1), code)
    assert time.monotonic() - started < 5
    assert result.error
    assert "started" in result.output  # partial output survives the kill
    assert "Execution timed out after 1 s; the process was killed." in result.output
    child = int((workspace.run_dir(RUN) / "child.pid").read_text())
    assert await wait_until_gone(child)


@pytest.mark.asyncio
async def test_cancellation_kills_the_program(workspace: Workspace) -> None:
    tool = PythonExecute(workspace, sandbox=UNCONFINED, timeout=200)
    code = "import os, time\nopen('me.pid', 'w').write(str(os.getpid()))\ntime.sleep(100)\n"
    env = ActivityEnvironment()
    task = asyncio.create_task(env.run(tool.run, ToolRequest(workspace=RUN, arguments={"code": code})))
    pid = await read_pid(workspace.run_dir(RUN) / "me.pid")
    await asyncio.sleep(1)
    cancelled_at = time.monotonic()
    env.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert time.monotonic() - cancelled_at < 5
    assert await wait_until_gone(pid)


@pytest.mark.asyncio
async def test_worker_secrets_are_not_visible(workspace: Workspace, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-test")
    code = "import os\nprint('OPENAI_API_KEY' in os.environ)\nprint(dict(os.environ))"
    result = await execute(PythonExecute(workspace, sandbox=UNCONFINED), code)
    assert not result.error
    assert result.output.splitlines()[0] == "False"
    assert "sk-secret-test" not in result.output


@pytest.mark.asyncio
async def test_memory_limit_stops_huge_allocations(workspace: Workspace) -> None:
    limit_before = resource.getrlimit(resource.RLIMIT_AS)
    result = await execute(PythonExecute(workspace, sandbox=UNCONFINED), "data = bytearray(4 * 1024**3)\nprint('allocated')")
    assert result.error
    assert "MemoryError" in result.output
    assert "allocated" not in result.output
    # The limit applied to the child only.
    assert resource.getrlimit(resource.RLIMIT_AS) == limit_before
    assert len(bytearray(64 * 1024**2)) == 64 * 1024**2


@pytest.mark.asyncio
@pytest.mark.parametrize("arguments", [{}, {"code": 42}, {"source": "print(1)"}])
async def test_bad_arguments_are_a_non_retryable_error(workspace: Workspace, arguments: dict) -> None:
    with pytest.raises(ApplicationError) as raised:
        request = ToolRequest(workspace=RUN, arguments=arguments)
        await ActivityEnvironment().run(PythonExecute(workspace, sandbox=UNCONFINED).run, request)
    assert raised.value.type == "BadToolArguments"
    assert raised.value.non_retryable


@pytest.mark.asyncio
async def test_heartbeats_while_the_program_runs(
    workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, heartbeat_timeout=timedelta(seconds=0.3))  # beats every 0.1 s
    beats: list[tuple] = []
    env.on_heartbeat = lambda *details: beats.append(details)
    request = ToolRequest(workspace=RUN, arguments={"code": "import time; time.sleep(0.6)"})
    await env.run(PythonExecute(workspace, sandbox=UNCONFINED).run, request)
    assert len(beats) >= 3


async def test_code_can_import_a_module_written_in_the_run_directory(tmp_path):
    workspace = Workspace(tmp_path / "root")
    (workspace.run_dir("run-imp") / "helper_mod.py").write_text("VALUE = 41 + 1\n")
    result = await ActivityEnvironment().run(
        PythonExecute(workspace, sandbox=UNCONFINED).run,
        ToolRequest(workspace="run-imp", arguments={"code": "import helper_mod; print(helper_mod.VALUE)"}),
    )
    assert not result.error and result.output.strip() == "42"
