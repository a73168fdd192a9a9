"""End to end: the mcp agent works through the tools of a local stdio MCP
server (testkit/mcp_servers.py, written with the mcp SDK) on the session's dev
server: the tools are listed at the start and recorded in the run, calls are
activities, the server's death mid-call is retried on a restarted server, and
a changed tool list reaches the model at its next think."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import signal
import sys
import uuid
from datetime import timedelta

import pytest
from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError, WorkflowHandle

pytest.importorskip("mcp", reason="the mcp package is not installed (pip install -r requirements.txt)")

from agent_model.mcp import function_name_for
from agent_model.profiles import get_profile
from agent_model.run import AgentRunInput, AgentRunResult
from config.mcp_config import McpServerSettings
from config.settings import Settings
from runtime.worker_factory import build_worker
from testkit.e2e import (
    child_env,
    closed_before_the_run,
    server_address,
    start_starter,
    unique_queue,
    wait_for_activity_start,
    wait_until,
)
from testkit.fake_openai import Reply, call, terminate
from testkit.mcp_servers import STDIO_ARGS
from testkit.settings import make_settings
from workflows.agent import AgentWorkflow

SERVER = "local"


def tool(tool_name: str, **arguments) -> Reply:
    return Reply(tool_calls=[call(function_name_for(SERVER, tool_name), arguments)])


def mcp_settings(base_url: str, tmp_path, servers: dict[str, McpServerSettings] | None = None) -> Settings:
    """Settings for a worker with `servers` (by default the stdio test server as SERVER)."""
    if servers is None:
        servers = {SERVER: McpServerSettings(kind="stdio", command=sys.executable, args=STDIO_ARGS)}
    return make_settings(base_url, tmp_path / "workspace").model_copy(update={"mcp_servers": servers})


def observation(result: AgentRunResult, step: int) -> str:
    return result.steps[step].tool_calls[0].observation


async def start_mcp_run(client, settings, task: str, name: str) -> WorkflowHandle:
    """An mcp agent run on the test's worker; bounded, so a hang fails the test."""
    return await client.start_workflow(
        AgentWorkflow.run,
        AgentRunInput(task=task, agent="mcp"),
        id=f"{name}-{uuid.uuid4().hex[:8]}",
        task_queue=settings.task_queue,
        execution_timeout=timedelta(seconds=120),
    )


async def test_an_mcp_run_lists_calls_survives_a_dead_server_and_sees_new_tools(dev_env, fake_llm, tmp_path):
    settings = mcp_settings(fake_llm.base_url, tmp_path)
    fake_llm.turns = [
        tool("add", a=2, b=3),
        tool("process_id"),
        tool("slow", seconds=2),  # the test kills the server during this call
        tool("fail", reason="no such thing"),
        tool("grow", name="fresh"),
        tool("fresh"),
        terminate("done"),
    ]
    async with build_worker(dev_env.client, settings):
        handle = await start_mcp_run(dev_env.client, settings, "Use the server.", "mcp")
        await wait_until(lambda: len(fake_llm.requests) >= 3, 30, "the slow call's think")
        await asyncio.sleep(0.8)
        pid = int(fake_llm.requests[2].messages[-2]["content"])
        os.kill(pid, signal.SIGKILL)
        result: AgentRunResult = await asyncio.wait_for(handle.result(), 60)
    history = await handle.fetch_history()

    assert result.succeeded, result.note
    assert observation(result, 0) == "5"
    assert observation(result, 2) == "slept 2.0"  # retried on a restarted server
    assert observation(result, 3).startswith("Error:") and "no such thing" in observation(result, 3)
    assert result.steps[3].tool_calls[0].error
    assert observation(result, 5) == "I am fresh"

    offered = [{t["function"]["name"] for t in request.tools} for request in fake_llm.requests]
    assert function_name_for(SERVER, "add") in offered[0] and "terminate" in offered[0]
    assert function_name_for(SERVER, "fresh") not in offered[4]
    assert function_name_for(SERVER, "fresh") in offered[5]

    scheduled = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events if e.HasField("activity_task_scheduled_event_attributes")
    ]
    # At the start, after the restarted server (its tools may differ), after `grow`.
    assert scheduled.count("mcp_list_tools") == 3
    retried = [
        e.activity_task_started_event_attributes.attempt
        for e in history.events if e.HasField("activity_task_started_event_attributes")
    ]
    assert max(retried) >= 2


async def test_cancel_during_an_mcp_call_ends_the_run_and_the_server_serves_the_next_run(dev_env, fake_llm, tmp_path):
    settings = mcp_settings(fake_llm.base_url, tmp_path)
    fake_llm.turns = [tool("slow", seconds=120), terminate("never")]
    async with build_worker(dev_env.client, settings):
        handle = await start_mcp_run(dev_env.client, settings, "Wait on the server.", "mcp-cancel")

        await wait_for_activity_start(handle, "mcp_call_tool")
        cancelled_at = asyncio.get_running_loop().time()
        await handle.cancel()
        with pytest.raises(WorkflowFailureError):
            await asyncio.wait_for(handle.result(), 15)
        took = asyncio.get_running_loop().time() - cancelled_at
        assert (await handle.describe()).status == WorkflowExecutionStatus.CANCELED
        # The run ended only once the call had stopped (WAIT_CANCELLATION_COMPLETED).
        assert closed_before_the_run(await handle.fetch_history(), "mcp_call_tool")

        fake_llm.turns = [tool("add", a=1, b=1), terminate("done")]
        second = await (await start_mcp_run(dev_env.client, settings, "Add.", "mcp-after-cancel")).result()
    assert took < 5, took
    assert second.succeeded and observation(second, 0) == "2"


async def test_an_unreachable_server_is_a_note_to_the_model_not_a_failure(dev_env, fake_llm, tmp_path):
    broken = McpServerSettings(kind="stdio", command=str(tmp_path / "no-such-server"))
    settings = mcp_settings(fake_llm.base_url, tmp_path, {"gone": broken})
    fake_llm.turns = [terminate("nothing to do")]
    async with build_worker(dev_env.client, settings):
        result: AgentRunResult = await (await start_mcp_run(dev_env.client, settings, "Use the server.", "mcp-gone")).result()
    assert result.succeeded
    first = json.dumps(fake_llm.requests[0].messages)
    assert "could not be reached" in first and "gone" in first


def test_the_mcp_profile_takes_every_configured_server():
    assert get_profile("mcp").mcp_servers == ["*"]


@pytest.mark.e2e  # starter.py/worker.py processes on the dev server
async def test_the_mcp_command_runs_a_server_given_on_the_command_line(dev_env, fake_llm, tmp_path):
    """`python starter.py mcp --command ...`, as OpenManus's run_mcp.py: the
    server is started by the starter's own worker for this run only."""
    fake_llm.turns = [Reply(tool_calls=[call(function_name_for("cli", "add"), {"a": 20, "b": 22})]), terminate("42")]
    env = child_env(tmp_path, address=server_address(dev_env), task_queue=unique_queue("mcp-cli"), base_url=fake_llm.base_url)
    command = " ".join(shlex.quote(part) for part in (sys.executable, *STDIO_ARGS))
    starter = start_starter(["mcp", "Add 20 and 22.", "--command", command], env, tmp_path / "logs")
    try:
        assert await starter.wait(60) == 0, starter.describe()
    finally:
        await starter.stop()
    assert "42" in starter.stdout()
    observations = [m for m in fake_llm.requests[1].messages if m.get("role") == "tool"]
    assert observations[-1]["content"] == "42"


async def test_a_worker_without_the_mcp_package_says_so(monkeypatch, tmp_path, caplog):
    from temporalio.exceptions import ApplicationError
    from temporalio.testing import ActivityEnvironment

    from agent_model.mcp import McpCallRequest, McpListRequest
    from runtime.worker_factory import mcp_pool, worker_resources
    from tools.mcp_tools import build_many as mcp_activities

    monkeypatch.setitem(sys.modules, "activities.mcp.pool", None)  # its import now fails, as without mcp
    settings = mcp_settings("http://127.0.0.1:1/v1", tmp_path)
    assert mcp_pool(settings) is None
    assert "mcp package cannot be loaded" in caplog.text
    resources = worker_resources(settings)
    listing, calling = mcp_activities(resources)
    listed = await ActivityEnvironment().run(listing, McpListRequest())
    assert listed.tools == [] and "mcp is not installed" in listed.problems[0]
    try:
        await ActivityEnvironment().run(calling, McpCallRequest(server=SERVER, tool="add"))
    except ApplicationError as e:
        assert e.non_retryable and "mcp is not installed" in e.message
    else:
        raise AssertionError("the call should fail")


async def test_a_worker_without_servers_tells_the_model_so(tmp_path):
    from temporalio.testing import ActivityEnvironment

    from activities.mcp.activities import McpActivities
    from activities.mcp.pool import McpPool
    from agent_model.mcp import McpListRequest

    listed = await ActivityEnvironment().run(McpActivities(McpPool({})).list_tools, McpListRequest())
    assert listed.tools == [] and "no MCP servers configured" in listed.problems[0]


async def test_a_tools_changed_signal_survives_continue_as_new(dev_env, fake_llm, tmp_path):
    """`grow` is the last step of an execution: the next execution lists the
    tools again before its first think, so the new tool is offered there."""
    settings = mcp_settings(fake_llm.base_url, tmp_path)
    fake_llm.turns = [tool("grow", name="carried"), tool("carried"), terminate("done")]
    async with build_worker(dev_env.client, settings):
        handle = await dev_env.client.start_workflow(
            AgentWorkflow.run,
            AgentRunInput(task="Grow, then use it.", agent="mcp", steps_per_run=1),
            id=f"mcp-can-{uuid.uuid4().hex[:8]}",
            task_queue=settings.task_queue,
            execution_timeout=timedelta(seconds=120),
        )
        result: AgentRunResult = await asyncio.wait_for(handle.result(), 60)
    offered = [{t["function"]["name"] for t in request.tools or []} for request in fake_llm.requests]
    assert result.succeeded, result.note
    assert function_name_for(SERVER, "carried") not in offered[0]
    assert function_name_for(SERVER, "carried") in offered[1]
    assert observation(result, 1) == "I am carried"
