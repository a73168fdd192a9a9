"""Cancel means cancel: a run (or a flow) cancelled while a step is in flight
stops within seconds, starts nothing new, and ends CANCELED in Temporal.

On the dev server with an in-process worker built like worker.py's, so the
heartbeats, their throttling and the cancellation's way back to the activity
are the real ones. Each test cancels only after the call's first heartbeat has
gone out: the SDK throttles the ones after it, which is where a cancellation
used to wait up to 8-12 s.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import CancelledError

from agent_model.plan import StepStatus
from agent_model.run import AgentStatus, StepRecord
from agent_model.state import AgentState
from runtime.worker_factory import build_worker
from testkit.e2e import has_heartbeated, live_processes, pid_alive, wait_until
from testkit.fake_openai import Reply, call, python, terminate
from testkit.settings import make_settings
from tests.test_agent_workflow import start
from tests.test_planning_flow import FlowScript, plan_reply, start_flow
from workflows.agent import AgentWorkflow
from workflows.planning import PlanningFlowWorkflow

pytestmark = pytest.mark.timeout(90)

CANCEL_BOUND = 3.0
"""Seconds from the cancel request to the run's end (and its processes' end)."""


@pytest.fixture
def dev_settings(fake_llm, tmp_path):
    return make_settings(fake_llm.base_url, tmp_path / "workspace")


@pytest.fixture
async def dev_worker(dev_env, dev_settings):
    async with build_worker(dev_env.client, dev_settings) as running:
        yield running


async def ends_canceled(handle: WorkflowHandle, since: float) -> float:
    """Seconds from `since` until the run ended, asserting it ended CANCELED."""
    with pytest.raises(WorkflowFailureError) as failure:
        await asyncio.wait_for(handle.result(), 30)
    ended = time.monotonic() - since
    assert isinstance(failure.value.cause, CancelledError), failure.value.cause
    assert (await handle.describe()).status == WorkflowExecutionStatus.CANCELED
    return ended


def sleeping_code(pid_file: Path, seconds: int) -> str:
    return f"import os, time\nopen({str(pid_file)!r}, 'w').write(str(os.getpid()))\ntime.sleep({seconds})"


def session_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[3])




async def tool_started(pid_file: Path) -> tuple[int, int]:
    """(pid, session) of the tool's program once it has written its pid."""
    await wait_until(lambda: pid_file.exists() and pid_file.read_text().strip(), 30, "the tool's program")
    pid = int(pid_file.read_text())
    return pid, session_of(pid)


async def test_cancel_during_a_slow_think(dev_env, dev_worker, dev_settings, fake_llm):
    fake_llm.turns = [
        Reply(content="slowly", tool_calls=[call("python_execute", {"code": "print(1)"})], delay=10),
        terminate("never reached"),
    ]
    handle = await start(dev_env, dev_settings)
    await fake_llm.await_requests(1, timeout=30)
    think = fake_llm.requests[0]
    await wait_until(lambda: has_heartbeated(handle, "think"), 10, "the think's first heartbeat")
    await asyncio.sleep(max(0.0, think.received_at + 3 - time.monotonic()))

    cancelled_at = time.monotonic()
    await handle.cancel()
    assert await ends_canceled(handle, cancelled_at) < CANCEL_BOUND
    # The think closed its connection before it reported the cancellation (the
    # fake's handler notices within 20 ms and forgets the connection).
    await wait_until(lambda: not fake_llm._conns, 10, "the think's connection to close")

    # The model's call was abandoned: the connection closed before the reply
    # was due, and no other think started.
    await asyncio.sleep(max(0.0, think.received_at + 10.5 - time.monotonic()))
    assert think.status is None and not think.completed
    assert len(fake_llm.requests) == 1

    # The closed run still answers queries (a worker replays it).
    status = await handle.query(AgentWorkflow.status, result_type=AgentStatus)
    assert (status.state, status.note) == (AgentState.CANCELLED, "the run was cancelled")
    assert await handle.query(AgentWorkflow.steps, 0, result_type=list[StepRecord]) == []


async def cancel_while_the_tool_runs(handle, running, pid_file) -> None:
    """Cancel `handle` once the tool of run `running` has heartbeated and run a
    while; the run must end CANCELED within the bound and the tool's processes
    be gone."""
    pid, session = await tool_started(pid_file)
    await wait_until(lambda: has_heartbeated(running, "python_execute"), 10, "the tool's first heartbeat")
    await asyncio.sleep(2.5)
    cancelled_at = time.monotonic()
    await handle.cancel()
    assert await ends_canceled(handle, cancelled_at) < CANCEL_BOUND
    assert not pid_alive(pid) and live_processes("session", session) == []


async def test_cancel_during_a_tool_call(dev_env, dev_worker, dev_settings, fake_llm, tmp_path):
    pid_file = tmp_path / "pid"
    fake_llm.turns = [
        Reply(tool_calls=[call("python_execute", {"code": sleeping_code(pid_file, 30)}), call("python_execute", {"code": "print(2)"})]),
        terminate("never reached"),
    ]
    handle = await start(dev_env, dev_settings)
    await cancel_while_the_tool_runs(handle, handle, pid_file)
    assert len(fake_llm.requests) == 1  # no next think

    (record,) = await handle.query(AgentWorkflow.steps, 0, result_type=list[StepRecord])
    first, second = record.tool_calls
    assert first.error and first.observation.startswith("Cancelled: the run was cancelled while python_execute ran")
    assert second.error and second.observation == "Not run: the run was cancelled."
    assert record.note == "the run was cancelled"
    status = await handle.query(AgentWorkflow.status, result_type=AgentStatus)
    assert status.state == AgentState.CANCELLED


async def test_cancel_that_arrives_as_the_call_completes_starts_nothing_new(dev_env, dev_worker, dev_settings, fake_llm):
    """The think completes normally although the run was cancelled (its reply
    was already on the way): the run must remember the request and stop."""
    fake_llm.turns = [Reply(content="done thinking", tool_calls=[call("python_execute", {"code": "print(1)"})], delay=1.5), terminate()]
    handle = await start(dev_env, dev_settings)
    await fake_llm.await_requests(1, timeout=30)
    # Cancel just before the reply is due: the activity, busy returning it,
    # completes instead of noticing the cancellation.
    await asyncio.sleep(max(0.0, fake_llm.requests[0].received_at + 1.45 - time.monotonic()))
    cancelled_at = time.monotonic()
    await handle.cancel()
    assert await ends_canceled(handle, cancelled_at) < CANCEL_BOUND
    await asyncio.sleep(1.0)
    assert len(fake_llm.requests) == 1
    history = await handle.fetch_history()
    scheduled = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
    ]
    assert scheduled == ["think"]  # no tool call, no next think (the directory: a local activity)


async def test_cancelling_a_flow_cancels_its_running_step(dev_env, dev_worker, dev_settings, fake_llm, tmp_path):
    pid_file = tmp_path / "pid"
    script = FlowScript(plan_reply("Sleep", "Never"), {1: [python(sleeping_code(pid_file, 60))], 2: [terminate()]})
    fake_llm.responder = script
    handle = await start_flow(dev_env, dev_settings)
    child = dev_env.client.get_workflow_handle(f"{handle.id}/step-1")
    await cancel_while_the_tool_runs(handle, child, pid_file)
    assert (await child.describe()).status == WorkflowExecutionStatus.CANCELED
    assert set(script.by_role) == {"plan", "step-1"}  # no next step, no replan, no summary

    plan = await handle.query(PlanningFlowWorkflow.plan_query)
    assert [s.status for s in plan.steps] == [StepStatus.BLOCKED, StepStatus.NOT_STARTED]
    assert plan.steps[0].notes == "cancelled"
    status = await child.query(AgentWorkflow.status, result_type=AgentStatus)
    assert status.state == AgentState.CANCELLED


async def test_cancel_while_the_run_waits_for_the_user(dev_env, dev_worker, dev_settings, fake_llm):
    fake_llm.turns = [Reply(tool_calls=[call("ask_human", {"inquire": "Anyone?"})]), terminate()]
    handle = await start(dev_env, dev_settings)
    await wait_until(lambda: handle.query(AgentWorkflow.pending_question), 30, "the question")
    cancelled_at = time.monotonic()
    await handle.cancel()
    assert await ends_canceled(handle, cancelled_at) < CANCEL_BOUND
    assert len(fake_llm.requests) == 1
    (record,) = await handle.query(AgentWorkflow.steps, 0, result_type=list[StepRecord])
    assert record.tool_calls[0].observation.startswith("Not answered: the run was cancelled")
    assert await handle.query(AgentWorkflow.pending_question) is None
