"""A run's workflow task timeout travels in its input (ContinuationLimits,
agent_model/continuation.py) and reaches its executions and a flow's step
runs; new runs leave it to the server (10 s), and their executions continue
as new at 2,000 events, so that a worker taking one over replays it well
inside that (bench P16). Runs whose input has no limits keep the server's
default and their 10,000 events. Started as the starter starts them, on the
real dev server."""

from __future__ import annotations

from datetime import timedelta

from agent_model import continuation
from agent_model.continuation import current_limits, limits_of_older_inputs
from agent_model.run import AgentRunInput
from runtime.run_start import start_agent_run, start_planning_flow
from runtime.worker_factory import build_worker
from testkit.fake_openai import terminate
from testkit.run_results import final_result
from testkit.settings import make_settings
from tests.test_planning_flow import FlowScript, plan_reply
from workflows.agent import AgentWorkflow

SERVER_DEFAULT = timedelta(seconds=10)


async def task_timeout(client, workflow_id: str, run_id: str | None = None) -> timedelta:
    handle = client.get_workflow_handle(workflow_id, run_id=run_id)
    async for event in handle.fetch_history_events():
        return event.workflow_execution_started_event_attributes.workflow_task_timeout.ToTimedelta()
    raise AssertionError("no history")


WORKFLOW_TASK_SECONDS = 7.0
"""Not the server's default, so that the test sees it arrive."""


def test_new_runs_leave_the_workflow_task_timeout_to_the_server_and_replay_2000_events_at_most():
    assert current_limits().workflow_task_timeout() is None
    assert current_limits().history_events == 2_000


async def test_the_inputs_workflow_task_timeout_reaches_the_run_and_a_flows_step_runs(
    dev_env, fake_llm, tmp_path, monkeypatch
):
    monkeypatch.setattr(continuation, "WORKFLOW_TASK_SECONDS", WORKFLOW_TASK_SECONDS)
    settings = make_settings(fake_llm.base_url, tmp_path / "workspace")
    async with build_worker(dev_env.client, settings):
        fake_llm.turns = [terminate("done")]
        run = await start_agent_run(
            dev_env.client, settings, "a task", agent="manus", max_steps=None, steps_per_run=None, run_id=None
        )
        await final_result(run)
        assert await task_timeout(dev_env.client, run.id) == timedelta(seconds=WORKFLOW_TASK_SECONDS)

        fake_llm.responder = FlowScript(plan_reply("[manus] Do it"), {1: [terminate("did it")]})
        flow = await start_planning_flow(
            dev_env.client, settings, "a flow", agents=("manus",), timeout=600, max_steps=None, steps_per_run=None,
            run_id=None,
        )
        await flow.result()
        assert await task_timeout(dev_env.client, flow.id) == timedelta(seconds=WORKFLOW_TASK_SECONDS)
        children = [
            e.child_workflow_execution_started_event_attributes.workflow_execution
            async for e in flow.fetch_history_events()
            if e.HasField("child_workflow_execution_started_event_attributes")
        ]
        assert children
        for child in children:
            assert await task_timeout(dev_env.client, child.workflow_id, child.run_id) == timedelta(
                seconds=WORKFLOW_TASK_SECONDS
            )


async def test_a_run_whose_input_has_no_limits_keeps_the_servers_default(dev_env, fake_llm, tmp_path):
    settings = make_settings(fake_llm.base_url, tmp_path / "workspace")
    fake_llm.turns = [terminate("done")]
    async with build_worker(dev_env.client, settings):
        handle = await dev_env.client.start_workflow(
            AgentWorkflow.run, AgentRunInput(task="an older input", agent="manus"), id=f"older-{tmp_path.name}",
            task_queue=settings.task_queue,
        )
        await final_result(handle)
    assert await task_timeout(dev_env.client, handle.id) == SERVER_DEFAULT
    assert limits_of_older_inputs().history_events == 10_000
