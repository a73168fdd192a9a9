"""Replay tests: AgentWorkflow must stay deterministic for runs already in flight.

* The committed history tests/histories/agent_run.json (python_execute,
  ask_human answered through the `answer` update, terminate; recorded by
  tests/record_history.py) must replay on the current code. When this fails,
  the change breaks runs started by the previous version: guard it with
  workflow.patched() or, if that is accepted, re-record the file.
* A deliberately altered copy of it must fail, proving the check has teeth.
* A history recorded in this session, from the current code, must replay too.
* tests/histories/agent_run_search_attributes.json, a 7-step run recorded by
  the version before AgentStep was published every 5 steps (commit 47359a2),
  started with search attributes as the starter starts runs: its upsert at
  every step must still replay (workflow.patched guards the change).
* The *_before_patch.json files, recorded by commit 91dfc04 (the version
  before cancellation ended runs CANCELED and empty replies stopped counting
  as answers; `python tests/record_history.py --scenario NAME` run from that
  checkout), must replay as they ran; the files of the same scenarios
  recorded by the current code show the new endings.
* tests/histories/agent_run_continued.json is the middle execution of a run
  that continued as new after every step: it begins from carried state and
  ends by continuing again.
* agent_run_profile_<agent>.json (each built-in profile but browser and mcp,
  which have files of their own) and flow_replanned.json were started as the
  starter starts runs, their profiles and continue-as-new thresholds in their
  input: they replay even on code that no longer has their agent.
"""

from __future__ import annotations

import base64
import copy
import json
import re

import pytest
from temporalio.client import WorkflowHistory
from temporalio.worker import UnsandboxedWorkflowRunner
from temporalio.workflow import NondeterminismError

from runtime.worker_factory import build_worker, workflow_runner

from testkit.fake_openai import Reply, call, python, terminate
from agent_model.profiles import BUILTIN_PROFILES
from tests.record_history import (
    HISTORY_PATH,
    HISTORY_WORKFLOW_ID,
    PROFILE_CALLS,
    SCENARIOS,
    profile_scenario,
    record_agent_run,
    record_continued_chain,
    replayer,
)
from tests.test_agent_workflow import start
from tests.test_planning_flow import FlowScript, plan_reply, start_flow
from agent_model.agent_loop import EMPTY_REPLY_PATCH
from workflows.agent import CANCEL_PATCH, CONTINUE_AS_NEW_PATCH


def committed_json() -> dict:
    return json.loads(HISTORY_PATH.read_text(encoding="utf-8"))


def as_history(data: dict, workflow_id: str = HISTORY_WORKFLOW_ID) -> WorkflowHistory:
    return WorkflowHistory.from_json(workflow_id, json.dumps(data))


def scheduled_activities(data: dict) -> list[dict]:
    return [
        e["activityTaskScheduledEventAttributes"]
        for e in data["events"]
        if "activityTaskScheduledEventAttributes" in e
    ]


def event_types(data: dict) -> list[str]:
    return [e["eventType"] for e in data["events"]]


async def test_committed_history_replays():
    data = committed_json()
    # The file is the scenario it claims to be, not an empty or truncated run.
    assert [a["activityType"]["name"] for a in scheduled_activities(data)] == [
        "prepare_workspace", "think", "python_execute", "think", "think",
    ]
    assert "EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED" in event_types(data)
    assert event_types(data)[-1] == "EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED"

    result = await replayer().replay_workflow(as_history(data))
    assert result.replay_failure is None


async def test_history_of_a_run_that_published_every_step_replays():
    data = json.loads((HISTORY_PATH.parent / "agent_run_search_attributes.json").read_text(encoding="utf-8"))
    upserts = event_types(data).count("EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES")
    assert upserts == 8  # one per step and the final state: the file is what it claims
    assert event_types(data)[-1] == "EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED"
    result = await replayer().replay_workflow(as_history(data, "agent-run-search-attributes"))
    assert result.replay_failure is None


def rename_first(data: dict, activity: str, to: str) -> None:
    first = next(a for a in scheduled_activities(data) if a["activityType"]["name"] == activity)
    first["activityType"]["name"] = to


@pytest.mark.parametrize(
    "activity, renamed",
    [("think", "think_v0"), ("python_execute", "bash")],
    ids=["first-think-renamed", "python-execute-became-bash"],
)
async def test_replay_fails_on_an_altered_history(activity, renamed):
    """As if the recorded run had called another activity where the current
    code calls `activity`: replay must report nondeterminism."""
    data = copy.deepcopy(committed_json())
    rename_first(data, activity, renamed)
    history = as_history(data)

    # Core's message: "Activity type of scheduled event 'bash' does not match
    # activity type of activity command 'python_execute'".
    with pytest.raises(NondeterminismError, match=f"'{re.escape(renamed)}'.*'{re.escape(activity)}'"):
        await replayer().replay_workflow(history)

    # The same failure, reported instead of raised.
    result = await replayer().replay_workflow(history, raise_on_replay_failure=False)
    assert isinstance(result.replay_failure, NondeterminismError)


async def test_history_recorded_now_replays(dev_env, fake_llm, tmp_path):
    """The current code replays its own fresh history (the committed file
    only proves compatibility with the version that recorded it)."""
    _, history = await record_agent_run(dev_env.client, fake_llm, tmp_path / "workspace")
    result = await replayer().replay_workflow(history)
    assert result.replay_failure is None

    # Round trip through JSON, as the committed file is loaded.
    again = WorkflowHistory.from_json(history.workflow_id, history.to_json())
    assert (await replayer().replay_workflow(again)).replay_failure is None


async def test_every_execution_of_a_continued_run_recorded_now_replays(dev_env, fake_llm, tmp_path):
    chain = await record_continued_chain(dev_env.client, fake_llm, tmp_path, f"continued-{tmp_path.name[-8:]}")
    for history in chain:
        assert (await replayer().replay_workflow(history)).replay_failure is None


async def test_planning_flow_history_replays(time_skipping_env, worker, settings, fake_llm):
    fake_llm.responder = FlowScript(
        plan_reply("One", "Two"),
        {1: [python("print(1)"), terminate("one")], 2: [Reply(tool_calls=[call("terminate", {"status": "failure"})])]},
        replan=Reply(tool_calls=[call("planning", {"command": "update", "steps": ["One", "Two", "Two again"]})]),
    )
    fake_llm.responder.steps[3] = [terminate("two")]
    handle = await start_flow(time_skipping_env, settings)
    await handle.result()
    history = await handle.fetch_history()
    assert any(e.HasField("start_child_workflow_execution_initiated_event_attributes") for e in history.events)
    await replayer().replay_workflow(history)
    child = await time_skipping_env.client.get_workflow_handle(f"{handle.id}/step-1").fetch_history()
    await replayer().replay_workflow(child)



async def test_a_run_on_an_unsandboxed_worker_replays_in_the_sandbox(time_skipping_env, settings, fake_llm):
    """[worker] workflow_sandbox = false changes how workflow code is run, not
    what it decides: the same history replays under the sandbox."""
    unsandboxed = settings.model_copy(update={"workflow_sandbox": False})
    assert isinstance(workflow_runner(unsandboxed), UnsandboxedWorkflowRunner)
    fake_llm.turns = [python("print(6*7)"), terminate("42")]
    async with build_worker(time_skipping_env.client, unsandboxed):
        handle = await start(time_skipping_env, unsandboxed, task="six times seven")
        assert (await handle.result()).final_answer == "42"
    assert (await replayer().replay_workflow(await handle.fetch_history())).replay_failure is None


def history_file(name: str) -> dict:
    return json.loads((HISTORY_PATH.parent / name).read_text(encoding="utf-8"))


def patch_ids(data: dict) -> list[str]:
    ids = []
    for e in data["events"]:
        marker = e.get("markerRecordedEventAttributes")
        if marker and "patch-data" in marker["details"]:
            payload = marker["details"]["patch-data"]["payloads"][0]["data"]
            ids.append(json.loads(base64.b64decode(payload))["id"])
    return ids


@pytest.mark.parametrize(
    "name, workflow_id, activities, ending",
    [
        ("agent_run_cancelled_before_patch.json", "agent-run-cancelled", ["prepare_workspace", "think", "python_execute"], "COMPLETED"),
        ("agent_run_cancelled.json", "agent-run-cancelled", ["prepare_workspace", "think", "python_execute"], "CANCELED"),
        ("agent_run_empty_reply_before_patch.json", "agent-run-empty-reply", ["prepare_workspace", "think"], "COMPLETED"),
        ("agent_run_empty_reply.json", "agent-run-empty-reply", ["prepare_workspace", "think", "think"], "COMPLETED"),
        ("flow_cancelled_before_patch.json", "flow-cancelled", ["think"], "COMPLETED"),
        ("flow_cancelled.json", "flow-cancelled", ["think"], "CANCELED"),
        ("agent_run_continued.json", "agent-run-continued", ["think", "python_execute"], "CONTINUED_AS_NEW"),
        (
            "agent_run_mcp.json", "agent-run-mcp",
            ["prepare_workspace", "mcp_list_tools", "think", "mcp_call_tool", "think"], "COMPLETED",
        ),
        (
            "agent_run_browser.json", "agent-run-browser",
            ["prepare_workspace", "think", "browser_act", "think", "browser_act", "think", "think", "browser_close"],
            "COMPLETED",
        ),
    ],
)
async def test_cancelled_and_empty_reply_histories_replay(name, workflow_id, activities, ending):
    data = history_file(name)
    # Each file is the scenario it claims to be.
    assert [a["activityType"]["name"] for a in scheduled_activities(data)] == activities
    assert event_types(data)[-1] == f"EVENT_TYPE_WORKFLOW_EXECUTION_{ending}"
    patches = patch_ids(data)
    if "cancelled" in name:
        assert "EVENT_TYPE_WORKFLOW_EXECUTION_CANCEL_REQUESTED" in event_types(data)
        assert (CANCEL_PATCH in patches) == (not name.endswith("_before_patch.json"))
    elif "mcp" in name:  # the server's tools, as listed, are in the history the run replays
        listing = next(
            e["eventId"] for e in data["events"]
            if e.get("activityTaskScheduledEventAttributes", {}).get("activityType", {}).get("name") == "mcp_list_tools"
        )
        listed = next(
            e["activityTaskCompletedEventAttributes"] for e in data["events"]
            if e.get("activityTaskCompletedEventAttributes", {}).get("scheduledEventId") == listing
        )
        assert "mcp_local_add" in base64.b64decode(listed["result"]["payloads"][0]["data"]).decode()
    elif "browser" in name:  # the page's later actions went to the worker that opened it
        queues = [a["taskQueue"]["name"] for a in scheduled_activities(data) if a["activityType"]["name"].startswith("browser_")]
        assert "/browser/" not in queues[0] and all("/browser/" in q for q in queues[1:])
    elif "continued" in name:  # begins from the state the first execution carried
        assert "continuedExecutionRunId" in data["events"][0]["workflowExecutionStartedEventAttributes"]
        assert CONTINUE_AS_NEW_PATCH in patches
    else:
        assert (EMPTY_REPLY_PATCH in patches) == (not name.endswith("_before_patch.json"))
    result = await replayer().replay_workflow(as_history(data, workflow_id))
    assert result.replay_failure is None


# ---- runs that carry their profile and thresholds (issue 20) ----------------------------

PROFILE_HISTORIES = [(agent, *SCENARIOS[profile_scenario(agent)]) for agent in PROFILE_CALLS]


def started_input(data: dict) -> dict:
    attributes = data["events"][0]["workflowExecutionStartedEventAttributes"]
    return json.loads(base64.b64decode(attributes["input"]["payloads"][0]["data"]))


def deploy_code_the_runs_never_saw(monkeypatch, agent: str) -> None:
    """A worker whose code no longer has the agent. (Changed thresholds are
    tested live, tests/test_deploy_open_runs.py: in a replay, the continue-as-new
    patch, asked only once they are reached, hides them.)"""
    monkeypatch.delitem(BUILTIN_PROFILES, agent)


@pytest.mark.parametrize("agent, name, workflow_id", PROFILE_HISTORIES, ids=[a for a, *_ in PROFILE_HISTORIES])
async def test_a_run_of_each_builtin_profile_replays_whatever_the_code_says_now(agent, name, workflow_id, monkeypatch):
    data = history_file(name)
    run = started_input(data)  # as the starter started it
    assert run["profile"]["name"] == agent and run["continuation"]["history_events"] > 1
    assert [a["activityType"]["name"] for a in scheduled_activities(data)].count("think") == 2
    assert event_types(data)[-1] == "EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED"
    assert (await replayer().replay_workflow(as_history(data, workflow_id))).replay_failure is None

    deploy_code_the_runs_never_saw(monkeypatch, agent)
    assert (await replayer().replay_workflow(as_history(data, workflow_id))).replay_failure is None


async def test_a_replanned_flow_replays_whatever_the_code_says_now(monkeypatch):
    name, workflow_id = SCENARIOS["flow-replanned"]
    data = history_file(name)
    assert set(started_input(data)["profiles"]) == {"manus"}
    # Plan, three steps (the second blocked, the third added by the replan), summary.
    assert [a["activityType"]["name"] for a in scheduled_activities(data)] == ["think"] * 3
    assert event_types(data).count("EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED") == 3
    assert event_types(data)[-1] == "EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED"
    assert (await replayer().replay_workflow(as_history(data, workflow_id))).replay_failure is None

    deploy_code_the_runs_never_saw(monkeypatch, "manus")
    assert (await replayer().replay_workflow(as_history(data, workflow_id))).replay_failure is None
