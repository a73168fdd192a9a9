"""Replay tests: both workflow types must stay deterministic for runs in flight.

Every file in tests/histories/ was recorded by tests/record_history.py from
the v1 baseline (no patch markers; docs/deploying.md says how a later change
is patched and which histories it then needs, and
tests/test_patch_lifecycle.py enforces it).

* Every committed history replays on the current code. When one fails, the
  change breaks runs started by the previous version: guard it with
  workflow.patched() as docs/deploying.md says or, if that is accepted,
  re-record the file.
* Each file is the scenario it claims to be (its activities and its ending).
* A deliberately altered copy of agent_run.json must fail, proving the check
  has teeth.
* Histories recorded in this session, from the current code, replay too.
* agent_run_forked.json is a fork (runtime/fork.py) of a run at step 1: it
  begins from the carried state and restores its directory first.
* agent_run_continued.json is the middle execution of a run that continued as
  new after every step: it begins from carried state and ends by continuing.
* agent_run_profile_<agent>.json (each built-in profile but browser and mcp,
  which have files of their own) and flow_replanned.json were started as the
  starter starts runs, their profiles, continue-as-new thresholds and search
  attributes in their input: they replay even on code that no longer has
  their agent and whose thresholds changed.
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
from testkit.run_results import final_result
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
    workflow_id_of,
)
from tests.test_agent_workflow import start
from tests.test_planning_flow import FlowScript, plan_reply, start_flow
from agent_model import continuation
from workflows import search_attributes


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


COMMITTED = sorted(HISTORY_PATH.parent.glob("*.json"))


@pytest.mark.parametrize("path", COMMITTED, ids=[p.name for p in COMMITTED])
async def test_every_committed_history_replays(path):
    """Including any added for a patch's branches (tests/histories/PATCHES.toml)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    history = as_history(data, workflow_id_of(path))
    result = await replayer().replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None, f"{path.name}: {result.replay_failure}"


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
    await final_result(handle)  # the flow ends BLOCKED: FAILED, its result in the failure
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


@pytest.mark.parametrize(
    "name, workflow_id, activities, ending",
    [
        ("agent_run_cancelled.json", "agent-run-cancelled", ["prepare_workspace", "think", "python_execute"], "CANCELED"),
        ("agent_run_empty_reply.json", "agent-run-empty-reply", ["prepare_workspace", "think", "think"], "COMPLETED"),
        ("flow_cancelled.json", "flow-cancelled", ["think"], "CANCELED"),
        ("agent_run_continued.json", "agent-run-continued", ["think", "python_execute"], "CONTINUED_AS_NEW"),
        (
            "agent_run_mcp.json", "agent-run-mcp",
            ["prepare_workspace", "mcp_list_tools", "think", "mcp_call_tool", "think"], "COMPLETED",
        ),
        (
            "agent_run_approval.json", "agent-run-approval",
            ["prepare_workspace", "think", "python_execute", "think", "python_execute", "think", "think"], "COMPLETED",
        ),
        ("agent_run_session.json", "agent-run-session", ["prepare_workspace", "think", "think"], "CONTINUED_AS_NEW"),
        ("agent_run_session_idle.json", "agent-run-session", ["think"], "COMPLETED"),
        (
            "agent_run_forked.json", "agent-run-forked",
            ["restore_workspace", "think", "python_execute", "think"], "COMPLETED",
        ),
        (
            "agent_run_local_reads.json", "agent-run-local-reads",
            ["think", "str_replace_editor", "think", "think"], "COMPLETED",
        ),
        (
            "agent_run_parallel_calls.json", "agent-run-parallel-calls",
            ["prepare_workspace", "think", "web_fetch", "web_fetch", "web_fetch", "think"], "COMPLETED",
        ),
        (
            "agent_run_browser.json", "agent-run-browser",
            ["prepare_workspace", "think", "browser_act", "think", "browser_act", "think", "think", "browser_close"],
            "COMPLETED",
        ),
    ],
)
async def test_each_scenario_history_is_what_it_claims_and_replays(name, workflow_id, activities, ending):
    data = history_file(name)
    assert [a["activityType"]["name"] for a in scheduled_activities(data)] == activities
    assert event_types(data)[-1] == f"EVENT_TYPE_WORKFLOW_EXECUTION_{ending}"
    if "cancelled" in name:
        assert "EVENT_TYPE_WORKFLOW_EXECUTION_CANCEL_REQUESTED" in event_types(data)
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
    elif "approval" in name:  # three decisions (the audit trail) and one wait that timed out
        decisions = [
            json.loads(base64.b64decode(e["workflowExecutionUpdateAcceptedEventAttributes"]["acceptedRequest"]["input"]["args"]["payloads"][0]["data"]))
            for e in data["events"]
            if "workflowExecutionUpdateAcceptedEventAttributes" in e
        ]
        assert [(d["call_id"], d["action"], d["decided_by"]) for d in decisions] == [
            ("1.1", "reject", "recorder"), ("1.2", "edit", "recorder"), ("2.1", "approve", "recorder")
        ]
        assert event_types(data).count("EVENT_TYPE_TIMER_FIRED") == 1
    elif "forked" in name:  # begins from the origin's state at step 1, naming the origin
        started = data["events"][0]["workflowExecutionStartedEventAttributes"]
        run = json.loads(base64.b64decode(started["input"]["payloads"][0]["data"]))
        assert (run["forked_from"]["run_id"], run["forked_from"]["step"], run["carried"]["step"]) == (
            "agent-run-forked-origin", 1, 1
        )
    elif "session" in name:  # turns begun by send_message; the idle end is a timer that fired
        messages = [
            json.loads(base64.b64decode(e["workflowExecutionUpdateAcceptedEventAttributes"]["acceptedRequest"]["input"]["args"]["payloads"][0]["data"]))
            for e in data["events"]
            if "workflowExecutionUpdateAcceptedEventAttributes" in e
        ]
        carried = started_input(data).get("carried")
        if name == "agent_run_session.json":
            assert messages == [{"text": "message 2"}, {"text": "message 3"}] and carried is None
        else:
            session = carried["session"]  # turn 3 had begun: its message is in memory, not the inbox
            assert messages == [] and session["turn"] == 3 and session["inbox"] == [] and carried["step"] == 2
            assert session["turns"][-1]["message"] == "message 3"
            assert event_types(data).count("EVENT_TYPE_TIMER_FIRED") == 1
    elif "parallel" in name:  # the reply's three fetches were scheduled together, by one workflow task
        fetches = [
            i for i, e in enumerate(data["events"])
            if e.get("activityTaskScheduledEventAttributes", {}).get("activityType", {}).get("name") == "web_fetch"
        ]
        assert fetches == list(range(fetches[0], fetches[0] + 3))
        assert started_input(data)["profile"]["tool_terms"]["web_fetch"]["concurrent"] is True
    elif "local_reads" in name:  # the view is a local activity's marker, the create an activity task
        markers = [e["markerRecordedEventAttributes"]["markerName"] for e in data["events"] if "markerRecordedEventAttributes" in e]
        assert markers.count("core_local_activity") == 2, markers  # prepare_workspace and the view
        assert started_input(data)["profile"]["tool_terms"]["str_replace_editor"]["local_reads"] == {"command": ["view"]}
    elif "continued" in name:  # begins from the state the first execution carried
        assert "continuedExecutionRunId" in data["events"][0]["workflowExecutionStartedEventAttributes"]
    result = await replayer().replay_workflow(as_history(data, workflow_id))
    assert result.replay_failure is None


# ---- runs that carry their profile and thresholds (issue 20) ----------------------------

PROFILE_HISTORIES = [(agent, *SCENARIOS[profile_scenario(agent)]) for agent in PROFILE_CALLS]


def child_agent_names(data: dict) -> list[str]:
    names = []
    for e in data["events"]:
        started = e.get("startChildWorkflowExecutionInitiatedEventAttributes")
        if started:
            field = started["searchAttributes"]["indexedFields"][search_attributes.AGENT_NAME.name]
            names.append(json.loads(base64.b64decode(field["data"])))
    return names


def started_input(data: dict) -> dict:
    attributes = data["events"][0]["workflowExecutionStartedEventAttributes"]
    return json.loads(base64.b64decode(attributes["input"]["payloads"][0]["data"]))


def deploy_code_the_runs_never_saw(monkeypatch, agent: str) -> None:
    """A worker whose code no longer has the agent, and whose thresholds would
    continue any run as new after its first event (a run's own are in its input)."""
    monkeypatch.delitem(BUILTIN_PROFILES, agent)
    monkeypatch.setattr(continuation, "HISTORY_EVENTS_PER_RUN", 1)
    monkeypatch.setattr(continuation, "HISTORY_BYTES_PER_RUN", 1)


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
    assert child_agent_names(data) == ["manus"] * 3  # each step's run filterable by its agent
    assert event_types(data)[-1] == "EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED"
    assert (await replayer().replay_workflow(as_history(data, workflow_id))).replay_failure is None

    deploy_code_the_runs_never_saw(monkeypatch, "manus")
    assert (await replayer().replay_workflow(as_history(data, workflow_id))).replay_failure is None


# ---- a run that ends at its budget (issue 21) -------------------------------------------


def completed_result(data: dict) -> dict:
    attributes = next(
        e["workflowExecutionCompletedEventAttributes"] for e in data["events"]
        if "workflowExecutionCompletedEventAttributes" in e
    )
    return json.loads(base64.b64decode(attributes["result"]["payloads"][0]["data"]))


async def test_a_run_that_ends_at_its_budget_replays():
    name, workflow_id = SCENARIOS["budget-reached"]
    data = history_file(name)
    run = started_input(data)  # as the starter started it: its ceiling and prices in its input
    assert run["budget"]["max_tokens"] == 250 and run["budget"]["prices"]["default"] == {
        "input": 2.5, "output": 10.0, "cached_input": None,
    }
    # Three steps, then no fourth think: the ceiling is checked before each.
    assert [a["activityType"]["name"] for a in scheduled_activities(data)] == [
        "prepare_workspace", *["think", "python_execute"] * 3,
    ]
    result = completed_result(data)
    assert (result["stop_reason"], result["steps_taken"], result["final_answer"]) == ("budget", 3, "step 3")
    assert result["note"] == "token budget of 250 reached after step 3: 360 tokens, $0.0014 spent"
    assert (await replayer().replay_workflow(as_history(data, workflow_id))).replay_failure is None
