"""Record the committed replay histories in tests/histories/.

    python tests/record_history.py [--scenario NAME] [--out PATH]

Runs one scenario on a throw-away local dev server (the `temporal` CLI of
this venv; nothing is downloaded; the workflows' search attributes
registered) with an in-process worker and the fake LLM, and writes the run's
event history as JSON. Scenarios:

    answered (default, agent_run.json): a manus run
        turn 0  python_execute  print(6*7)
        turn 1  ask_human       -> answered through the `answer` update
        turn 2  terminate       with the final answer
    cancelled (agent_run_cancelled.json): a manus run cancelled while its
        python_execute sleeps
    empty-reply (agent_run_empty_reply.json): a manus run whose model replies
        with neither text nor a tool call, twice
    gave-up (agent_run_gave_up.json): a manus run: python_execute, then
        terminate with status failure (it gave up; since the patch
        task-not-done-fails it ends FAILED, its result in the failure)
    flow-cancelled (flow_cancelled.json): a PlanningFlow cancelled while its
        first step's python_execute sleeps (the flow's history only)
    continued (agent_run_continued.json): a manus run that continues as new
        after every step (bash cd, python_execute, terminate); the file holds
        its middle execution, which begins from carried state and continues
    mcp (agent_run_mcp.json): an mcp run with the stdio test server of
        testkit/mcp_servers.py: its tools listed, one call, terminate
    browser (agent_run_browser.json): a browser run on the fixture site
        (testkit/fake_site.py; needs Chromium): go_to_url, extract_content
        (its own think), terminate; its actions after the first go to the
        worker's own task queue, and the browser is closed at the end
    parallel-calls (agent_run_parallel_calls.json): a manus run started as the
        starter starts it (web_fetch marked concurrent in its input): one
        reply of three web_fetch calls on a local server, all three in flight
        at once (testkit/crowd.py), then terminate
    local-reads (agent_run_local_reads.json): a manus run started as the
        starter starts it (the editor's view marked a local read in its
        input): create a file, view it (a local activity: a marker, no
        activity task), terminate
    profile-AGENT (agent_run_profile_AGENT.json), for manus, swe,
        data_analysis, planning and toolcall: a run started as the starter
        starts it, its resolved profile and thresholds in its input and its
        search attributes set; one call of one of the profile's tools, then
        terminate
    flow-replanned (flow_replanned.json): a PlanningFlow started as the
        starter starts it (profiles in its input, search attributes set, which
        its step runs get too): plan of two steps, the second blocks, a replan
        adds a third, which completes; the summary (the flow ends BLOCKED,
        since step 2 stays blocked; FAILED since task-not-done-fails, and so
        does step 2's run: flow_replanned_failed.json)
    budget-reached (agent_run_budget_reached.json): a manus run started as the
        starter starts it with --max-tokens 250 and the config's prices: two
        python_execute steps of 120 tokens each, a third (360 in all), then
        the run ends at its ceiling before a fourth think (stop reason budget)
    budget-raised (agent_run_budget_raised.json): the same run with
        ask_at_ceiling: at 360 of 250 tokens it asks; 'lots' is asked again,
        '1000 tokens' raises the ceiling, and a fourth think terminates

The files in tests/histories/ were recorded by the v1 baseline (no patch
markers) but those PATCHES.toml lists as a patch's `with`. A scenario is written the same way by the code of any version, so
running this script from an older checkout records what that version did:
that is how the history of a patch's old branch is made (docs/deploying.md,
tests/histories/PATCHES.toml). Re-record a file only when a change is *meant*
to be incompatible with runs in flight (and say so in the change);
tests/test_replay.py fails until then.

tests/test_replay.py imports record_agent_run() to record the `answered`
scenario against the code under test.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

REPO_DIR = Path(__file__).resolve().parent.parent
if str(REPO_DIR) not in sys.path:  # run as a script: tests/ is sys.path[0]
    sys.path.insert(0, str(REPO_DIR))

from temporalio.client import Client, WorkflowFailureError, WorkflowHandle, WorkflowHistory  # noqa: E402
from temporalio.contrib.pydantic import pydantic_data_converter  # noqa: E402
from temporalio.service import RPCError  # noqa: E402
from temporalio.testing import WorkflowEnvironment  # noqa: E402
from temporalio.worker import Replayer  # noqa: E402

from agent_model.approval import ApprovalMode, ApprovalPolicy  # noqa: E402
from agent_model.approval_desk import ApprovalAction, ApprovalDecision  # noqa: E402
from agent_model.flow import PlanningFlowInput  # noqa: E402
from agent_model.profiles import AgentProfile  # noqa: E402
from agent_model.run import AgentRunInput, AgentRunResult, AgentStatus, HumanAnswer, HumanQuestion  # noqa: E402
from agent_model.session import SessionMessage, SessionTerms  # noqa: E402
from agent_model.state import AgentState, StopReason  # noqa: E402
from config.settings import LLMSettings, Settings  # noqa: E402
from runtime.worker_factory import WORKFLOWS, build_worker, sandboxed_runner  # noqa: E402
from testkit.fake_openai import FakeOpenAI, Reply, call, turn_of  # noqa: E402
from testkit.held_workspace import held_workspace_worker  # noqa: E402
from testkit.run_results import final_result  # noqa: E402
from workflows import search_attributes  # noqa: E402
from workflows.agent import AgentWorkflow  # noqa: E402
from workflows.planning import PlanningFlowWorkflow  # noqa: E402

HISTORY_PATH = Path(__file__).resolve().parent / "histories" / "agent_run.json"
HISTORY_WORKFLOW_ID = "agent-run-history"
"""Workflow id of the committed history (needed again to replay it)."""
IDENTITY = "record_history"
"""Client and worker identity written into the history instead of pid@host."""

TASK = "Compute 6*7 with python, ask me which format I want, then answer."
QUESTION = "Should the answer be a number or words?"
HUMAN_ANSWER = "words, please"
FINAL_ANSWER = "forty-two"


def script() -> list[Reply]:
    """The fake LLM's replies, one per turn."""
    return [
        Reply(content="Let me compute it.", tool_calls=[call("python_execute", {"code": "print(6*7)"})]),
        Reply(tool_calls=[call("ask_human", {"inquire": QUESTION})]),
        Reply(tool_calls=[call("terminate", {"status": "success", "answer": FINAL_ANSWER})]),
    ]


def replayer() -> Replayer:
    """A Replayer configured like runtime.worker_factory.build_worker's Worker."""
    return Replayer(
        workflows=WORKFLOWS,
        data_converter=pydantic_data_converter,
        workflow_runner=sandboxed_runner(),
    )


async def pending_question(handle: WorkflowHandle, timeout: float) -> HumanQuestion:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            status = await handle.query(AgentWorkflow.status, result_type=AgentStatus)
        except RPCError:
            status = None  # first workflow task not done yet
        if status is not None and status.pending_question is not None:
            return status.pending_question
        await asyncio.sleep(0.05)
    raise TimeoutError(f"no question from run {handle.id} within {timeout} s")


def recording_settings(fake: FakeOpenAI, workspace_root: Path, **extra) -> Settings:
    return Settings(
        llm={"default": LLMSettings(model="gpt-4o", base_url=fake.base_url, api_key="test-key")},
        workspace_root=workspace_root,
        task_queue=f"record-{uuid.uuid4().hex[:8]}",
        **extra,
    )


def unconfined_settings(fake: FakeOpenAI, scratch: Path) -> Settings:
    # The sleeping tool reports its start through a file outside its run directory.
    return recording_settings(fake, scratch / "workspace", tool_sandbox="none")


async def record_agent_run(
    client: Client,
    fake: FakeOpenAI,
    workspace_root: Path,
    workflow_id: str | None = None,
    timeout: float = 60,
) -> tuple[AgentRunResult, WorkflowHistory]:
    """Run the scenario to its end with an in-process worker; return the
    result and the run's full history. Raises AssertionError if the run did
    not go as scripted (a history of a broken run would prove little)."""
    fake.turns = script()
    settings = recording_settings(fake, workspace_root)
    workflow_id = workflow_id or f"agent-run-{uuid.uuid4().hex[:8]}"
    async with build_worker(client, settings, identity=IDENTITY):
        handle = await client.start_workflow(
            AgentWorkflow.run,
            AgentRunInput(task=TASK, agent="manus"),
            id=workflow_id,
            task_queue=settings.task_queue,
            result_type=AgentRunResult,
        )
        question = await pending_question(handle, timeout)
        assert question.text == QUESTION, question
        await handle.execute_update(AgentWorkflow.answer, HumanAnswer(question_id=question.id, text=HUMAN_ANSWER))
        result = await asyncio.wait_for(final_result(handle), timeout)
    assert (result.state, result.stop_reason) == (AgentState.FINISHED, StopReason.TERMINATED), result
    assert result.final_answer == FINAL_ANSWER, result
    assert result.steps[0].tool_calls[0].observation.strip() == "42", result.steps[0]
    assert result.steps[1].tool_calls[0].observation == f"The user answered: {HUMAN_ANSWER}", result.steps[1]
    assert [r.turn for r in fake.completed()] == [0, 1, 2]
    return result, await handle.fetch_history()


def sleeping_code(started: Path) -> str:
    return f"import time\nopen({str(started)!r}, 'w').write('started')\ntime.sleep(60)"


async def _closed(handle: WorkflowHandle, started: Path, timeout: float) -> None:
    """Cancel the run once its tool has started; wait until it has closed,
    however this version ends a cancelled run."""
    deadline = time.monotonic() + timeout
    while not started.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"the tool of {handle.id} did not start within {timeout} s")
        await asyncio.sleep(0.05)
    await handle.cancel()
    try:
        await asyncio.wait_for(handle.result(), timeout)
    except WorkflowFailureError:
        pass  # CANCELED
    events = (await handle.fetch_history()).events
    assert any(e.HasField("workflow_execution_cancel_requested_event_attributes") for e in events)


async def record_cancelled_run(
    client: Client, fake: FakeOpenAI, scratch: Path, workflow_id: str, timeout: float = 60
) -> WorkflowHistory:
    started = scratch / "tool-started"
    fake.turns = [
        Reply(content="This takes a while.", tool_calls=[call("python_execute", {"code": sleeping_code(started)})]),
        Reply(tool_calls=[call("terminate", {"status": "success", "answer": "never reached"})]),
    ]
    settings = unconfined_settings(fake, scratch)
    async with build_worker(client, settings, identity=IDENTITY):
        handle = await client.start_workflow(
            AgentWorkflow.run, AgentRunInput(task="Sleep a minute.", agent="manus"), id=workflow_id, task_queue=settings.task_queue
        )
        await _closed(handle, started, timeout)
    return await handle.fetch_history()


async def record_cancelled_preparing_run(
    client: Client, fake: FakeOpenAI, scratch: Path, workflow_id: str, timeout: float = 60
) -> WorkflowHistory:
    """Cancelled while its directory is made (testkit/held_workspace.py): the
    call ends, then the run (patch cancel-waits-for-workspace)."""
    queue = f"record-{uuid.uuid4().hex[:8]}"
    async with held_workspace_worker(client, queue, scratch / "workspace", identity=IDENTITY) as held:
        handle = await client.start_workflow(
            AgentWorkflow.run, AgentRunInput(task="Cancelled at the start.", agent="manus"), id=workflow_id, task_queue=queue
        )
        await asyncio.wait_for(held.started.wait(), timeout)
        await handle.cancel()
        await asyncio.sleep(1)
        held.released.set()
        try:
            await asyncio.wait_for(handle.result(), timeout)
        except WorkflowFailureError:
            pass  # CANCELED
    return await handle.fetch_history()


async def record_empty_reply_run(
    client: Client, fake: FakeOpenAI, scratch: Path, workflow_id: str, timeout: float = 60
) -> WorkflowHistory:
    fake.turns = [[Reply(content=None), Reply(content=None)]]
    run = AgentRunInput(task="Say something.", agent="manus")
    _, handle = await run_to_end(client, unconfined_settings(fake, scratch), run, workflow_id, timeout)
    return await handle.fetch_history()


async def record_gave_up_run(
    client: Client, fake: FakeOpenAI, scratch: Path, workflow_id: str, timeout: float = 60
) -> WorkflowHistory:
    fake.turns = [
        Reply(content="Let me look.", tool_calls=[call("python_execute", {"code": "print(6*7)"})]),
        Reply(tool_calls=[call("terminate", {"status": "failure", "answer": "I could not find it."})]),
    ]
    run = AgentRunInput(task="Find the missing file.", agent="manus")
    result, handle = await run_to_end(client, unconfined_settings(fake, scratch), run, workflow_id, timeout)
    assert (result.state, result.stop_reason) == (AgentState.FINISHED, StopReason.GAVE_UP), result
    return await handle.fetch_history()


async def run_to_end(
    client: Client, settings: Settings, run: AgentRunInput, workflow_id: str, timeout: float, **start: Any
) -> tuple[AgentRunResult, WorkflowHandle]:
    """The run's result with an in-process worker, and its handle; `start`
    goes to start_workflow."""
    async with build_worker(client, settings, identity=IDENTITY):
        handle = await client.start_workflow(
            AgentWorkflow.run, run, id=workflow_id, task_queue=settings.task_queue, result_type=AgentRunResult, **start
        )
        return await asyncio.wait_for(final_result(handle), timeout), handle


async def record_cancelled_flow(
    client: Client, fake: FakeOpenAI, scratch: Path, workflow_id: str, timeout: float = 60
) -> WorkflowHistory:
    started = scratch / "tool-started"

    def responder(body: dict, attempt: int) -> Reply:
        if body["messages"][0]["content"].startswith("You are Manus"):
            return Reply(tool_calls=[call("python_execute", {"code": sleeping_code(started)})])
        if body.get("tools"):
            plan = {"command": "create", "plan_id": "p", "title": "Sleep", "steps": ["Sleep a minute", "Report"]}
            return Reply(tool_calls=[call("planning", plan)])
        return Reply(content="Summary.")

    fake.responder = responder
    settings = unconfined_settings(fake, scratch)
    async with build_worker(client, settings, identity=IDENTITY):
        handle = await client.start_workflow(
            PlanningFlowWorkflow.run, PlanningFlowInput(task="Sleep a minute."), id=workflow_id, task_queue=settings.task_queue
        )
        await _closed(handle, started, timeout)
    return await handle.fetch_history()


async def record_continued_chain(
    client: Client, fake: FakeOpenAI, scratch: Path, workflow_id: str, timeout: float = 60
) -> list[WorkflowHistory]:
    """Every execution's history, first to last."""
    fake.turns = [
        Reply(tool_calls=[call("bash", {"command": "mkdir -p out && cd out"})]),
        Reply(tool_calls=[call("python_execute", {"code": "print(6*7)"})]),
        Reply(tool_calls=[call("terminate", {"status": "success", "answer": FINAL_ANSWER})]),
    ]
    settings = unconfined_settings(fake, scratch)
    async with build_worker(client, settings, identity=IDENTITY):
        handle = await client.start_workflow(
            AgentWorkflow.run,
            AgentRunInput(task=TASK, agent="manus", steps_per_run=1),
            id=workflow_id,
            task_queue=settings.task_queue,
            result_type=AgentRunResult,
        )
        result = await asyncio.wait_for(final_result(handle), timeout)
    assert result.final_answer == FINAL_ANSWER and result.steps_taken == 3, result
    chain, run_id = [], handle.first_execution_run_id
    while run_id:
        history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        chain.append(history)
        last = history.events[-1]
        run_id = last.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
    assert len(chain) == 3, len(chain)
    return chain


async def record_continued_run(
    client: Client, fake: FakeOpenAI, scratch: Path, workflow_id: str, timeout: float = 60
) -> WorkflowHistory:
    return (await record_continued_chain(client, fake, scratch, workflow_id, timeout))[1]


async def record_browser_run(
    client: Client, fake: FakeOpenAI, scratch: Path, workflow_id: str, timeout: float = 60
) -> WorkflowHistory:
    from config.settings import WebSettings
    from testkit.fake_site import FakeSite
    from prompts.browser import EXTRACT_SYSTEM_PROMPT

    site = FakeSite().start()
    turns = [
        Reply(tool_calls=[call("browser_use", {"action": "go_to_url", "url": site.url("/page2")})]),
        Reply(tool_calls=[call("browser_use", {"action": "extract_content", "goal": "the heading"})]),
        Reply(tool_calls=[call("terminate", {"status": "success", "answer": FINAL_ANSWER})]),
    ]

    def responder(body: dict, attempt: int) -> Reply:
        if body["messages"][0]["content"] == EXTRACT_SYSTEM_PROMPT:
            return Reply(content="The heading is 'Second page'.")
        return turns[turn_of(body)]

    fake.responder = responder
    settings = recording_settings(fake, scratch / "workspace", tool_sandbox="auto", web=WebSettings(allow=(site.origin,)))
    try:
        run = AgentRunInput(task="Read the second page's heading.", agent="browser")
        result, handle = await run_to_end(client, settings, run, workflow_id, timeout)
    finally:
        site.stop()
    assert result.final_answer == FINAL_ANSWER and not any(c.error for s in result.steps for c in s.tool_calls), result
    return await handle.fetch_history()


async def record_mcp_run(
    client: Client, fake: FakeOpenAI, scratch: Path, workflow_id: str, timeout: float = 60
) -> WorkflowHistory:
    from agent_model.mcp import function_name_for
    from config.mcp_config import McpServerSettings
    from testkit.mcp_servers import STDIO_ARGS

    fake.turns = [
        Reply(tool_calls=[call(function_name_for("local", "add"), {"a": 6, "b": 7})]),
        Reply(tool_calls=[call("terminate", {"status": "success", "answer": FINAL_ANSWER})]),
    ]
    server = McpServerSettings(kind="stdio", command=sys.executable, args=STDIO_ARGS)
    settings = recording_settings(fake, scratch / "workspace", mcp_servers={"local": server})
    run = AgentRunInput(task="Add 6 and 7.", agent="mcp")
    result, handle = await run_to_end(client, settings, run, workflow_id, timeout)
    assert result.final_answer == FINAL_ANSWER and result.steps[0].tool_calls[0].observation == "13", result
    return await handle.fetch_history()


async def record_parallel_calls_run(
    client: Client, fake: FakeOpenAI, scratch: Path, workflow_id: str, timeout: float = 60
) -> WorkflowHistory:
    from config.settings import WebSettings
    from runtime.run_start import agent_run_input
    from testkit.crowd import Crowd
    from testkit.fake_web import FakeWeb

    web, crowd = FakeWeb().start(), Crowd(3)
    try:
        urls = [web.route(f"/page{n}", crowd) for n in (1, 2, 3)]
        fake.turns = [
            Reply(tool_calls=[call("web_fetch", {"url": url}) for url in urls]),
            Reply(tool_calls=[call("terminate", {"status": "success", "answer": FINAL_ANSWER})]),
        ]
        settings = recording_settings(fake, scratch / "workspace", web=WebSettings(allow=(web.origin,)))
        run = agent_run_input("Read the three pages.", agent="manus")
        assert run.profile is not None and run.profile.tool_terms["web_fetch"].concurrent
        result, handle = await run_to_end(
            client, settings, run, workflow_id, timeout, search_attributes=search_attributes.initial("manus"),
        )
    finally:
        web.stop()
    assert crowd.most_in_flight == 3, crowd.most_in_flight
    observations = [c.observation.splitlines()[-1] for c in result.steps[0].tool_calls]
    assert observations == [f"/page{n} answered 3 in flight." for n in (1, 2, 3)], observations
    return await handle.fetch_history()


PROFILE_CALLS = {
    "manus": call("python_execute", {"code": "print(6*7)"}),
    "swe": call("bash", {"command": "echo 42"}),
    "data_analysis": call("python_execute", {"code": "print(6*7)"}),
    "planning": call("planning", {"command": "create", "plan_id": "p", "title": "Answer", "steps": ["Compute", "Say it"]}),
    "toolcall": call("create_chat_completion", {"response": "42"}),
}
"""Per built-in profile, the one tool call its recorded run makes before terminate."""


async def record_local_reads_run(
    client: Client, fake: FakeOpenAI, scratch: Path, workflow_id: str, timeout: float = 60
) -> WorkflowHistory:
    from runtime.run_start import agent_run_input

    editor = "str_replace_editor"
    fake.turns = [
        Reply(tool_calls=[call(editor, {"command": "create", "path": "answer.txt", "file_text": "42\n"})]),
        Reply(tool_calls=[call(editor, {"command": "view", "path": "answer.txt"})]),
        Reply(tool_calls=[call("terminate", {"status": "success", "answer": FINAL_ANSWER})]),
    ]
    run = agent_run_input(TASK, agent="manus")
    assert run.profile is not None and run.profile.tool_terms[editor].local_reads, run.profile.tool_terms[editor]
    result, handle = await run_to_end(
        client, unconfined_settings(fake, scratch), run, workflow_id, timeout,
        search_attributes=search_attributes.initial("manus"),
    )
    assert "42" in result.steps[1].tool_calls[0].observation, result
    return await handle.fetch_history()


def profile_scenario(agent: str) -> str:
    return f"profile-{agent}"


async def record_profile_run(
    client: Client, fake: FakeOpenAI, scratch: Path, workflow_id: str, agent: str, timeout: float = 60
) -> WorkflowHistory:
    from runtime.run_start import agent_run_input

    fake.turns = [
        Reply(tool_calls=[PROFILE_CALLS[agent]]),
        Reply(tool_calls=[call("terminate", {"status": "success", "answer": FINAL_ANSWER})]),
    ]
    run = agent_run_input(TASK, agent=agent)
    result, handle = await run_to_end(
        client, unconfined_settings(fake, scratch), run, workflow_id, timeout,
        search_attributes=search_attributes.initial(agent),
    )
    assert result.final_answer == FINAL_ANSWER and not result.steps[0].tool_calls[0].error, result
    return await handle.fetch_history()


async def record_replanned_flow(
    client: Client, fake: FakeOpenAI, scratch: Path, workflow_id: str, timeout: float = 60
) -> WorkflowHistory:
    from agent_model.flow import FlowOutcome
    from prompts import planning as prompts
    from runtime.run_start import planning_flow_input

    def responder(body: dict, attempt: int) -> Reply:
        system = body["messages"][0]["content"]
        if system.startswith(prompts.PLAN_SYSTEM_PROMPT):
            plan = {"command": "create", "plan_id": "p", "title": "Answer", "steps": ["Compute", "Check"]}
            return Reply(tool_calls=[call("planning", plan)])
        if system.startswith(prompts.REPLAN_SYSTEM_PROMPT):
            return Reply(tool_calls=[call("planning", {"command": "update", "steps": ["Compute", "Check", "Check again"]})])
        if system == prompts.FINALIZE_SYSTEM_PROMPT:
            return Reply(content="Summary: 42.")
        step = next(m for m in body["messages"] if m["role"] == "user")["content"]
        status = "failure" if "Your step (step 2)" in step else "success"
        return Reply(tool_calls=[call("terminate", {"status": status, "answer": FINAL_ANSWER})])

    fake.responder = responder
    flow = planning_flow_input("Compute 6*7 and check it.", agents=("manus",), timeout=600)
    settings = unconfined_settings(fake, scratch)
    async with build_worker(client, settings, identity=IDENTITY):
        handle = await client.start_workflow(
            PlanningFlowWorkflow.run, flow, id=workflow_id, task_queue=settings.task_queue,
            search_attributes=search_attributes.initial(search_attributes.FLOW_AGENT_NAME),
        )
        result = await asyncio.wait_for(final_result(handle), timeout)
    # The blocked step stays blocked in the revised plan, so the flow ends BLOCKED.
    assert (result.outcome, result.replans, len(result.steps)) == (FlowOutcome.BLOCKED, 1, 3), result
    assert result.steps[2].status.value == "completed" and result.summary == "Summary: 42.", result
    return await handle.fetch_history()


async def record_parallel_flow(
    client: Client, fake: FakeOpenAI, scratch: Path, workflow_id: str, timeout: float = 60
) -> WorkflowHistory:
    """Steps 1 and 2 need nothing, step 3 needs both: 1 and 2 run as concurrent children."""
    from agent_model.flow import FlowOutcome
    from prompts import planning as prompts
    from runtime.run_start import planning_flow_input

    def responder(body: dict, attempt: int) -> Reply:
        system = body["messages"][0]["content"]
        if system.startswith(prompts.PLAN_SYSTEM_PROMPT):
            plan = {
                "command": "create", "plan_id": "p", "title": "Two sums, then their total",
                "steps": ["Add 1 and 2", "Add 3 and 4", "Add the two sums"], "depends_on": [[], [], [1, 2]],
            }
            return Reply(tool_calls=[call("planning", plan)])
        if system == prompts.FINALIZE_SYSTEM_PROMPT:
            return Reply(content="Summary: 10.")
        return Reply(tool_calls=[call("terminate", {"status": "success", "answer": "done"})], delay=0.5)

    fake.responder = responder
    flow = planning_flow_input("Add 1+2 and 3+4, then the two sums.", agents=("manus",), timeout=600)
    assert flow.parallel_steps > 1, flow
    settings = unconfined_settings(fake, scratch)
    async with build_worker(client, settings, identity=IDENTITY):
        handle = await client.start_workflow(
            PlanningFlowWorkflow.run, flow, id=workflow_id, task_queue=settings.task_queue,
            search_attributes=search_attributes.initial(search_attributes.FLOW_AGENT_NAME),
        )
        result = await asyncio.wait_for(final_result(handle), timeout)
    assert result.outcome == FlowOutcome.COMPLETED and len(result.steps) == 3, result
    history = await handle.fetch_history()
    order = [
        "start" if e.HasField("start_child_workflow_execution_initiated_event_attributes") else "end"
        for e in history.events
        if e.HasField("start_child_workflow_execution_initiated_event_attributes")
        or e.HasField("child_workflow_execution_completed_event_attributes")
    ]
    assert order[:2] == ["start", "start"], order  # steps 1 and 2 ran side by side
    return history


BUDGET_TOKENS = 250
BUDGET_STEP_USAGE = (100, 20)
"""Prompt and completion tokens of each think of the budget-reached scenario."""


async def record_budget_run(
    client: Client, fake: FakeOpenAI, scratch: Path, workflow_id: str, timeout: float = 60
) -> WorkflowHistory:
    from agent_model.budget import Budget, Prices
    from runtime.run_start import agent_run_input

    fake.turns = [
        *(
            Reply(content=f"step {n}", tool_calls=[call("python_execute", {"code": f"print({n})"})], usage=BUDGET_STEP_USAGE)
            for n in (1, 2, 3)
        ),
        Reply(tool_calls=[call("terminate", {"status": "success", "answer": "never reached"})]),
    ]
    budget = Budget(max_tokens=BUDGET_TOKENS, prices={"default": Prices(input=2.5, output=10)})
    run = agent_run_input("Count to three, one python call a step.", agent="manus", budget=budget)
    result, handle = await run_to_end(
        client, unconfined_settings(fake, scratch), run, workflow_id, timeout,
        search_attributes=search_attributes.initial("manus"),
    )
    assert (result.stop_reason, result.steps_taken, result.final_answer) == (StopReason.BUDGET, 3, "step 3"), result
    assert len(fake.completed()) == 3, "a fourth think started"
    return await handle.fetch_history()


async def record_budget_raised_run(
    client: Client, fake: FakeOpenAI, scratch: Path, workflow_id: str, timeout: float = 60
) -> WorkflowHistory:
    from agent_model.budget import Budget, Prices
    from runtime.run_start import agent_run_input

    fake.turns = [
        *(
            Reply(content=f"step {n}", tool_calls=[call("python_execute", {"code": f"print({n})"})], usage=BUDGET_STEP_USAGE)
            for n in (1, 2, 3)
        ),
        Reply(tool_calls=[call("terminate", {"status": "success", "answer": "counted"})], usage=BUDGET_STEP_USAGE),
    ]
    budget = Budget(max_tokens=BUDGET_TOKENS, prices={"default": Prices(input=2.5, output=10)}, ask_at_ceiling=True)
    run = agent_run_input("Count to three, one python call a step.", agent="manus", budget=budget)
    settings = unconfined_settings(fake, scratch)
    async with build_worker(client, settings, identity=IDENTITY):
        handle = await client.start_workflow(
            AgentWorkflow.run, run, id=workflow_id, task_queue=settings.task_queue, result_type=AgentRunResult,
            search_attributes=search_attributes.initial("manus"),
        )
        for reply in ("lots", "1000 tokens"):
            question = await pending_question(handle, timeout)
            await handle.execute_update(AgentWorkflow.answer, HumanAnswer(question_id=question.id, text=reply))
        result = await asyncio.wait_for(final_result(handle), timeout)
    assert (result.stop_reason, result.steps_taken, result.final_answer) == (StopReason.TERMINATED, 4, "counted"), result
    assert result.raised_budget is not None and result.raised_budget.max_tokens == 1000, result
    return await handle.fetch_history()


APPROVAL_TIMEOUT_SECONDS = 8
"""The recorded run's gates wait this long: the last call is left undecided."""


async def pending_approval_of(handle: WorkflowHandle, call_id: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            waiting = await handle.query(AgentWorkflow.pending_approval)
        except RPCError:
            waiting = None
        if waiting is not None and waiting.id == call_id:
            return
        await asyncio.sleep(0.05)
    raise TimeoutError(f"call {call_id} of run {handle.id} did not wait for approval within {timeout} s")


async def record_approval_run(client: Client, fake: FakeOpenAI, scratch: Path, workflow_id: str) -> WorkflowHistory:
    """Two gated calls in one reply, rejected and edited; then one approved;
    then one nobody decides (rejected by the policy's default)."""
    risky = "import subprocess\nprint({})"
    fake.turns = [
        Reply(tool_calls=[call("python_execute", {"code": risky.format(1)}), call("python_execute", {"code": risky.format(2)})]),
        Reply(tool_calls=[call("python_execute", {"code": risky.format(3)})]),
        Reply(tool_calls=[call("python_execute", {"code": risky.format(4)})]),
        Reply(tool_calls=[call("terminate", {"status": "success", "answer": "decided"})]),
    ]
    profile = AgentProfile(name="gated", tools=["python_execute", "terminate"], max_steps=6, max_observe=2000)
    policy = ApprovalPolicy(mode=ApprovalMode.RISKY, timeout_seconds=APPROVAL_TIMEOUT_SECONDS)
    settings = recording_settings(fake, scratch / "workspace")
    async with build_worker(client, settings, identity=IDENTITY):
        handle = await client.start_workflow(
            AgentWorkflow.run,
            AgentRunInput(task="Run the four snippets.", profile=profile, approval=policy),
            id=workflow_id,
            task_queue=settings.task_queue,
            result_type=AgentRunResult,
        )
        decisions = [
            ApprovalDecision(call_id="1.1", action=ApprovalAction.REJECT, reason="not this one", decided_by="recorder"),
            ApprovalDecision(
                call_id="1.2", action=ApprovalAction.EDIT, arguments=json.dumps({"code": "print('edited')"}),
                decided_by="recorder",
            ),
            ApprovalDecision(call_id="2.1", action=ApprovalAction.APPROVE, decided_by="recorder"),
        ]
        for decision in decisions:
            await pending_approval_of(handle, decision.call_id, 60)
            await handle.execute_update(AgentWorkflow.decide, decision)
        result = await asyncio.wait_for(final_result(handle), 60)
    calls = [c for record in result.steps for c in record.tool_calls]
    assert [c.approval.action.value if c.approval else None for c in calls] == [
        "reject", "edit", "approve", "reject", None
    ], calls
    assert calls[0].observation == "The user rejected this call: not this one", calls[0]
    assert calls[1].observation.strip() == "edited" and calls[2].observation.strip() == "3", calls
    assert calls[3].approval.decided_by == "timeout" and result.final_answer == "decided", calls[3]
    return await handle.fetch_history()


async def record_forked_run(client: Client, fake: FakeOpenAI, scratch: Path, workflow_id: str) -> WorkflowHistory:
    """A run that writes a file in step 1 and changes it in step 2, forked at
    step 1 with a message: the fork restores the file, reads it, ends."""
    from runtime.fork import start_fork

    settings = recording_settings(fake, scratch / "workspace")
    fake.turns = [
        Reply(tool_calls=[call("python_execute", {"code": "open('a.txt','w').write('one')"})]),
        Reply(tool_calls=[call("python_execute", {"code": "open('a.txt','w').write('two')"})]),
        Reply(tool_calls=[call("terminate", {"status": "success", "answer": "origin done"})]),
    ]
    origin, _ = await run_to_end(client, settings, AgentRunInput(task="Write a.txt twice."), f"{workflow_id}-origin", 60)
    assert origin.steps_taken == 3, origin
    fake.turns = [
        fake.turns[0],
        Reply(tool_calls=[call("python_execute", {"code": "print(open('a.txt').read())"})]),
        Reply(tool_calls=[call("terminate", {"status": "success", "answer": "forked"})]),
    ]
    async with build_worker(client, settings, identity=IDENTITY):
        handle = await start_fork(client, settings, f"{workflow_id}-origin", 1, message="Read it back.", run_id=workflow_id)
        result = await asyncio.wait_for(final_result(handle), 60)
    assert result.final_answer == "forked" and result.steps[-2].tool_calls[0].observation.strip() == "one", result
    return await handle.fetch_history()


SESSION_IDLE_SECONDS = 3
"""A recorded session's idle time: long enough for the recorder's next message."""


async def record_session_chain(
    client: Client, fake: FakeOpenAI, scratch: Path, workflow_id: str, timeout: float = 60
) -> list[WorkflowHistory]:
    """A session of three turns, the second and third begun by send_message,
    continued as new between turns 2 and 3 (steps_per_run 2), ended by its
    idle time; every execution's history, first to last."""
    fake.responder = lambda body, attempt: Reply(  # one think per turn: turn n's has n - 1 replies before it
        tool_calls=[call("terminate", {"status": "success", "answer": f"answer {turn_of(body) + 1}"})]
    )
    settings = recording_settings(fake, scratch / "workspace")
    terms = SessionTerms(idle_seconds=SESSION_IDLE_SECONDS)
    async with build_worker(client, settings, identity=IDENTITY):
        handle = await client.start_workflow(
            AgentWorkflow.run,
            AgentRunInput(task=TASK, agent="manus", session=terms, steps_per_run=2),
            id=workflow_id,
            task_queue=settings.task_queue,
            result_type=AgentRunResult,
        )
        for turn in (2, 3):
            deadline = asyncio.get_running_loop().time() + timeout
            while True:
                view = await handle.query(AgentWorkflow.session)
                if view is not None and view.idle and view.turn == turn - 1:
                    break
                assert asyncio.get_running_loop().time() < deadline, f"turn {turn - 1} did not end"
                await asyncio.sleep(0.05)
            reply = await handle.execute_update(AgentWorkflow.send_message, SessionMessage(text=f"message {turn}"))
            assert reply == f"turn {turn} starts now", reply
        result = await asyncio.wait_for(final_result(handle), timeout)
    assert [t.answer for t in result.turns] == ["answer 1", "answer 2", "answer 3"], result.turns
    assert "idle for 3 s" in (result.note or ""), result.note
    chain, run_id = [], handle.first_execution_run_id
    while run_id:
        history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        chain.append(history)
        run_id = history.events[-1].workflow_execution_continued_as_new_event_attributes.new_execution_run_id
    assert len(chain) == 2, len(chain)
    return chain


async def record_session_run(client: Client, fake: FakeOpenAI, scratch: Path, workflow_id: str) -> WorkflowHistory:
    """The session's first execution: two turns, then continue-as-new between turns."""
    return (await record_session_chain(client, fake, scratch, workflow_id))[0]


async def record_session_idle_run(client: Client, fake: FakeOpenAI, scratch: Path, workflow_id: str) -> WorkflowHistory:
    """The session's second execution: its carried state, a turn, the idle end."""
    return (await record_session_chain(client, fake, scratch, workflow_id))[1]


SCENARIOS = {
    "answered": (HISTORY_PATH.name, HISTORY_WORKFLOW_ID),
    "cancelled": ("agent_run_cancelled.json", "agent-run-cancelled"),
    "cancelled-preparing": ("agent_run_cancelled_preparing.json", "agent-run-cancelled-preparing"),
    "empty-reply": ("agent_run_empty_reply.json", "agent-run-empty-reply"),
    "gave-up": ("agent_run_gave_up.json", "agent-run-gave-up"),
    "flow-cancelled": ("flow_cancelled.json", "flow-cancelled"),
    "continued": ("agent_run_continued.json", "agent-run-continued"),
    "browser": ("agent_run_browser.json", "agent-run-browser"),
    "mcp": ("agent_run_mcp.json", "agent-run-mcp"),
    "flow-replanned": ("flow_replanned.json", "flow-replanned"),
    "flow-parallel": ("flow_parallel.json", "flow-parallel"),
    "budget-reached": ("agent_run_budget_reached.json", "agent-run-budget-reached"),
    "budget-raised": ("agent_run_budget_raised.json", "agent-run-budget-raised"),
    "approval-decided": ("agent_run_approval.json", "agent-run-approval"),
    "forked": ("agent_run_forked.json", "agent-run-forked"),
    "session": ("agent_run_session.json", "agent-run-session"),
    "session-idle": ("agent_run_session_idle.json", "agent-run-session"),
    "parallel-calls": ("agent_run_parallel_calls.json", "agent-run-parallel-calls"),
    "local-reads": ("agent_run_local_reads.json", "agent-run-local-reads"),
    **{
        profile_scenario(agent): (f"agent_run_profile_{agent}.json", f"agent-run-profile-{agent.replace('_', '-')}")
        for agent in PROFILE_CALLS
    },
}
"""Scenario: (default file name in tests/histories/, workflow id)."""


def workflow_id_of(path: Path) -> str:
    """The workflow id a committed file was recorded with (a flow's replay
    needs it: its children's ids derive from it). A file written with --out is
    named after its scenario's file: agent_run_cancelled_old.json is a
    `cancelled` run."""
    owner = max(
        (entry for entry in SCENARIOS.values() if path.stem.startswith(Path(entry[0]).stem)),
        key=lambda entry: len(entry[0]),
        default=None,
    )
    if owner is None:
        raise ValueError(f"{path.name} is not named after a scenario's file ({', '.join(sorted(SCENARIOS))})")
    return owner[1]


async def record(scenario: str, client: Client, fake: FakeOpenAI, scratch: Path) -> WorkflowHistory:
    workflow_id = SCENARIOS[scenario][1]
    if scenario == "answered":
        return (await record_agent_run(client, fake, scratch / "workspace", workflow_id))[1]
    if scenario.startswith("profile-"):
        return await record_profile_run(client, fake, scratch, workflow_id, scenario.removeprefix("profile-"))
    recorder = {
        "cancelled": record_cancelled_run,
        "cancelled-preparing": record_cancelled_preparing_run,
        "empty-reply": record_empty_reply_run,
        "gave-up": record_gave_up_run,
        "flow-cancelled": record_cancelled_flow,
        "continued": record_continued_run,
        "browser": record_browser_run,
        "mcp": record_mcp_run,
        "flow-replanned": record_replanned_flow,
        "flow-parallel": record_parallel_flow,
        "budget-reached": record_budget_run,
        "budget-raised": record_budget_raised_run,
        "approval-decided": record_approval_run,
        "forked": record_forked_run,
        "session": record_session_run,
        "session-idle": record_session_idle_run,
        "parallel-calls": record_parallel_calls_run,
        "local-reads": record_local_reads_run,
    }[scenario]
    return await recorder(client, fake, scratch, workflow_id)


def history_json(history: WorkflowHistory) -> str:
    """Indented, so a re-recorded file diffs readably."""
    return json.dumps(json.loads(history.to_json()), indent=2) + "\n"


async def main_async(out: Path, scenario: str = "answered") -> None:
    temporal = Path(sys.executable).parent / "temporal"
    if not temporal.exists():
        raise SystemExit(f"{temporal} is missing: pip install -r requirements.txt")
    with tempfile.TemporaryDirectory(prefix="record-history-") as scratch, FakeOpenAI() as fake:
        env = await WorkflowEnvironment.start_local(
            data_converter=pydantic_data_converter,
            dev_server_existing_path=str(temporal),
            ip="127.0.0.1",
            search_attributes=search_attributes.ALL,
        )
        try:
            client = await Client.connect(
                env.client.service_client.config.target_host,
                namespace=env.client.namespace,
                data_converter=pydantic_data_converter,
                identity=IDENTITY,
            )
            history = await record(scenario, client, fake, Path(scratch))
        finally:
            await env.shutdown()
    await replayer().replay_workflow(history)  # never commit a history that does not replay
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(history_json(history), encoding="utf-8")
    print(f"wrote {out} ({len(history.events)} events, workflow id {history.workflow_id})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", choices=sorted(SCENARIOS), default="answered")
    parser.add_argument("--out", type=Path, help="default: tests/histories/<the scenario's file>")
    args = parser.parse_args(argv)
    asyncio.run(main_async(args.out or HISTORY_PATH.parent / SCENARIOS[args.scenario][0], args.scenario))
    return 0


if __name__ == "__main__":
    sys.exit(main())
