"""A call that only reads (the editor's `view`) runs as a local activity in the
workflow task that got the reply, when the run's input says so; an edit stays
an activity; an input written before the mark runs every call as an activity;
no snapshot follows a view.

On the dev server with an in-process worker and the fake LLM.
"""

from __future__ import annotations

import json
import uuid

import pytest

from activities.workspace import Workspace
from activities.workspace_snapshots import SnapshotStore
from agent_model.profiles import AgentProfile
from agent_model.run import AgentRunInput, AgentRunResult
from agent_model.workspace_names import workspace_name_for
from runtime.worker_factory import build_worker
from testkit.fake_openai import Reply, call, terminate
from testkit.run_results import final_result
from tools import with_tool_terms
from workflows.agent import AgentWorkflow

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

EDITOR = "str_replace_editor"
PROFILE = AgentProfile(
    name="reader",
    system_prompt="You edit files in {directory}.",
    next_step_prompt="What next?",
    tools=[EDITOR, "terminate"],
    max_steps=6,
    max_observe=2000,
)


def editor(command: str, path: str, **more) -> Reply:
    return Reply(tool_calls=[call(EDITOR, {"command": command, "path": path, **more})])


def older_input(profile: AgentProfile) -> AgentProfile:
    """The profile as an input written before tools carried local_reads."""
    data = json.loads(profile.model_dump_json())
    for terms in data["tool_terms"].values():
        del terms["local_reads"]
    return AgentProfile.model_validate(data)


def editor_calls(history) -> list[str]:
    """"activity" or "local" for each editor call, in history order."""
    kinds = []
    for event in history.events:
        if event.HasField("activity_task_scheduled_event_attributes"):
            if event.activity_task_scheduled_event_attributes.activity_type.name == EDITOR:
                kinds.append("activity")
        elif event.HasField("marker_recorded_event_attributes"):
            data = event.marker_recorded_event_attributes.details.get("data")
            if data is not None and any(EDITOR in p.data.decode("utf-8", "replace") for p in data.payloads):
                kinds.append("local")
    return kinds


async def run_editing(dev_env, settings, profile: AgentProfile, fake_llm):
    fake_llm.turns = [
        editor("create", "notes.txt", file_text="first line\nsecond line\n"),
        editor("view", "notes.txt"),
        editor("view", "missing.txt"),
        terminate("viewed"),
    ]
    workflow_id = f"reader-{uuid.uuid4().hex[:8]}"
    async with build_worker(dev_env.client, settings):
        handle = await dev_env.client.start_workflow(
            AgentWorkflow.run,
            AgentRunInput(task="Write notes, then read them.", profile=profile),
            id=workflow_id,
            task_queue=settings.task_queue,
            result_type=AgentRunResult,
        )
        result = await final_result(handle)
    return result, await handle.fetch_history(), workflow_id


async def test_a_view_runs_as_a_local_activity_and_an_edit_as_an_activity(dev_env, fake_llm, settings):
    profile = with_tool_terms(PROFILE)
    assert profile.tool_terms[EDITOR].local_reads == {"command": ["view"]}
    result, history, workflow_id = await run_editing(dev_env, settings, profile, fake_llm)

    assert editor_calls(history) == ["activity", "local", "local"]
    created, viewed, missing = (step.tool_calls[0] for step in result.steps[:3])
    assert not created.error
    assert "first line" in viewed.observation and "second line" in viewed.observation and not viewed.error
    assert missing.error and "missing.txt" in missing.observation
    # A view changes nothing: only the create's step has a snapshot.
    store = SnapshotStore(Workspace(settings.workspace_root))
    assert store.steps(workspace_name_for(workflow_id), workflow_id) == [1]


async def test_an_input_without_the_mark_runs_its_views_as_activities(dev_env, fake_llm, settings):
    profile = older_input(with_tool_terms(PROFILE))
    assert profile.tool_terms[EDITOR].local_reads == {}
    result, history, _ = await run_editing(dev_env, settings, profile, fake_llm)

    assert editor_calls(history) == ["activity", "activity", "activity"]
    assert "second line" in result.steps[1].tool_calls[0].observation
