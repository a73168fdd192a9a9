"""A cancelled run ends only once every call it started has ended, so no call
stays open (and shown running in the Web UI) under a closed run: the calls
that used to be cancelled with TRY_CANCEL, the directory made at the start
(a local activity since workspace-in-first-task), the MCP listing and the
browser close, now wait for their call to end."""

from __future__ import annotations

import asyncio
import sys
import uuid
from datetime import timedelta

import pytest
from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError
from temporalio.workflow import ActivityCancellationType

import tools
from agent_model.run import AgentRunInput
from config.mcp_config import McpServerSettings
from runtime.worker_factory import build_worker
from testkit.e2e import closed_before_the_run, wait_for_activity_start
from testkit.fake_openai import terminate
from testkit.held_workspace import held_workspace_worker
from testkit.settings import make_settings
from workflows.agent import AgentWorkflow

pytestmark = pytest.mark.timeout(90)


async def ends_canceled(handle) -> None:
    with pytest.raises(WorkflowFailureError):
        await asyncio.wait_for(handle.result(), 30)
    assert (await handle.describe()).status == WorkflowExecutionStatus.CANCELED


async def test_a_run_cancelled_while_its_directory_is_made_ends_after_that_call(dev_env, tmp_path):
    queue = f"held-{uuid.uuid4().hex[:8]}"
    async with held_workspace_worker(dev_env.client, queue, tmp_path / "workspace") as held:
        handle = await dev_env.client.start_workflow(
            AgentWorkflow.run, AgentRunInput(task="Anything.", agent="manus"), id=f"held-{uuid.uuid4().hex[:8]}", task_queue=queue
        )
        await asyncio.wait_for(held.started.wait(), 30)
        await handle.cancel()
        await asyncio.sleep(1.5)
        # Still open: the call is a local activity of the run's first workflow task, and the
        # cancel reaches the run in the next task, once the call has ended.
        assert (await handle.describe()).status == WorkflowExecutionStatus.RUNNING
        held.released.set()
        await ends_canceled(handle)
    history = await handle.fetch_history()
    # A local activity's marker is written when the call has ended; the think that
    # task scheduled was asked to cancel, and ended, before the run closed.
    assert [e.marker_recorded_event_attributes.marker_name for e in history.events].count("core_local_activity") == 1
    assert closed_before_the_run(history, "think")


async def test_a_run_cancelled_while_it_lists_mcp_tools_ends_after_the_listing(dev_env, fake_llm, tmp_path):
    pytest.importorskip("mcp", reason="the mcp package is not installed (pip install -r requirements.txt)")
    # A stdio "server" that never answers: the listing waits on its 30 s connect.
    mute = McpServerSettings(kind="stdio", command=sys.executable, args=["-c", "import time; time.sleep(120)"])
    settings = make_settings(fake_llm.base_url, tmp_path / "workspace").model_copy(update={"mcp_servers": {"mute": mute}})
    fake_llm.turns = [terminate("never reached")]
    async with build_worker(dev_env.client, settings):
        handle = await dev_env.client.start_workflow(
            AgentWorkflow.run,
            AgentRunInput(task="Use the server.", agent="mcp"),
            id=f"mcp-list-cancel-{uuid.uuid4().hex[:8]}",
            task_queue=settings.task_queue,
            execution_timeout=timedelta(seconds=120),
        )
        await wait_for_activity_start(handle, "mcp_list_tools")
        await asyncio.sleep(1.5)  # past the first heartbeat, which carries the cancel back
        await handle.cancel()
        await ends_canceled(handle)
    assert closed_before_the_run(await handle.fetch_history(), "mcp_list_tools")
    assert fake_llm.requests == []


def test_every_activity_a_tool_schedules_waits_for_its_cancellation():
    """The browser close (and any own activity of a workflow tool) as well as
    the tools' own calls: cancelled, the run waits for the call to end."""
    for spec in tools.TOOLS.values():
        configs = {"": spec.activity} if spec.activity is not None else {}
        for key, config in {**configs, **spec.own_activities}.items():
            assert config["cancellation_type"] == ActivityCancellationType.WAIT_CANCELLATION_COMPLETED, (spec.name, key)
