"""A new run's fixed cost (issue 24): its first workflow task makes the run's
directory (prepare_workspace as a local activity, patch
workspace-in-first-task) and schedules the first think itself, so no
activity task and no workflow task of their own come before the first think.
On the real dev server, with the product's worker."""

from __future__ import annotations

from pathlib import Path

from temporalio.api.enums.v1 import EventType

from agent_model.activity_specs import THINK
from agent_model.state import AgentState, StopReason
from runtime.worker_factory import build_worker
from testkit.fake_openai import Reply
from testkit.run_results import final_result
from testkit.settings import make_settings
from tests.test_agent_workflow import start

LOCAL_ACTIVITY_MARKER = "core_local_activity"
"""The marker the SDK's core records for a local activity's result."""


def first_workflow_task(history) -> list:
    """The events the run's first workflow task wrote: after its completion,
    up to the next workflow task or the run's first activity task starting."""
    events = list(history.events)
    completed = next(i for i, e in enumerate(events) if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED)
    written = []
    for event in events[completed + 1 :]:
        if event.event_type in (EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED, EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED):
            break
        written.append(event)
    return written


async def test_a_new_runs_first_workflow_task_makes_its_directory_and_schedules_the_first_think(
    dev_env, fake_llm, tmp_path
):
    settings = make_settings(fake_llm.base_url, tmp_path / "workspace")
    fake_llm.turns = [Reply(content="It is 42.")]
    async with build_worker(dev_env.client, settings):
        handle = await start(dev_env, settings)
        result = await final_result(handle)
    assert (result.state, result.stop_reason) == (AgentState.FINISHED, StopReason.ANSWERED), result
    history = await handle.fetch_history()

    scheduled = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
    ]
    assert scheduled == [THINK]  # no prepare_workspace activity task
    first = first_workflow_task(history)
    markers = [e.marker_recorded_event_attributes.marker_name for e in first if e.HasField("marker_recorded_event_attributes")]
    assert LOCAL_ACTIVITY_MARKER in markers  # the directory, made inside the task
    assert [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in first
        if e.HasField("activity_task_scheduled_event_attributes")
    ] == [THINK]
    # One workflow task to start the think, one to end the run on its answer.
    kinds = [e.event_type for e in history.events]
    assert kinds.count(EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED) == 2

    # The directory is the worker's, made, and the first think's prompt names it.
    assert result.directory is not None
    directory = Path(result.directory)
    assert directory.is_dir() and directory.parent == (tmp_path / "workspace").resolve()
    assert fake_llm.requests[0].messages[0]["content"] == f"You are a test agent in {result.directory}."
