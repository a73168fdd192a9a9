"""What the page shows of one run, read from Temporal: a running run from its
workflow's queries (steps, status, session; a flow's plan), a closed one from
its result (runtime/run_list.result_of), or, without a result, from the
queries a worker answers by replaying it."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from temporalio.api.common.v1 import WorkflowExecution as ProtoWorkflowExecution
from temporalio.api.workflowservice.v1 import GetWorkflowExecutionHistoryRequest
from temporalio.client import Client, WorkflowExecutionDescription
from temporalio.service import RPCError

from agent_model.flow import PlanningFlowResult
from agent_model.fork import ForkOrigin
from agent_model.outcome_words import Outcome, StateClass, outcome_of
from agent_model.plan import Plan
from agent_model.run import AgentRunInput, AgentRunResult, AgentStatus, StepRecord
from agent_model.session import SessionView, TurnRecord
from agent_model.workspace_names import workspace_name_for
from runtime import run_control
from runtime.run_list import CLOSED_WORDS, WAITS_FOR_ANSWER, WAITS_FOR_APPROVAL, WITH_RESULT, result_of, task_of
from runtime.user_errors import RunControlError, RunEnded
from workflows.agent import AgentWorkflow

QUERY_TIMEOUT = timedelta(seconds=5)
"""How long the page waits for a worker to answer a query before it says none did."""
STEPS_SHOWN = 300
"""Newest steps a run's page shows at once (`python starter.py show ID` has them all)."""
IDLE_WORD = "idle: waits for a message"


@dataclass
class RunView:
    run_id: str
    description: WorkflowExecutionDescription
    task: str = ""
    records: list[StepRecord] = field(default_factory=list)
    older_left_out: int = 0
    turns: list[TurnRecord] = field(default_factory=list)
    status: AgentStatus | None = None
    """An agent run's status; a flow's: its working step's (what it waits for is the flow's)."""
    plan: Plan | None = None
    result: AgentRunResult | PlanningFlowResult | None = None
    ended_line: str | None = None
    """How a closed run without a result ended."""
    unanswered: str | None = None
    """Why the page could not read what the run's worker would say, if it could not."""
    workspace: str = ""
    origin: ForkOrigin | None = None
    session: bool = False
    working_step: str | None = None
    """A flow's step run in progress."""

    @property
    def is_flow(self) -> bool:
        return run_control.is_flow(self.description)

    @property
    def running(self) -> bool:
        return run_control.is_running(self.description)

    @property
    def parent_id(self) -> str | None:
        return self.description.parent_id

    def outcome(self) -> Outcome:
        """Where the run is, in the list's words."""
        if self.running:
            status = self.status
            if status is not None and status.pending_question is not None:
                return Outcome(WAITS_FOR_ANSWER, "the run asks you a question", StateClass.WAITING)
            if status is not None and status.pending_approval is not None:
                return Outcome(WAITS_FOR_APPROVAL, "a tool call waits for your decision", StateClass.WAITING)
            if status is not None and status.state.value == "IDLE":
                return Outcome(IDLE_WORD, "the session's turn ended; send the next message", StateClass.WAITING)
            return Outcome("running", "the run is working", StateClass.RUNNING)
        if self.result is not None:
            return outcome_of(self.result)
        words = CLOSED_WORDS.get(self.description.status) if self.description.status else None
        return words or Outcome(run_control.closed_state(self.description).lower(), "", StateClass.FAILED)

    @property
    def last_step(self) -> int:
        return self.records[-1].step if self.records else 0


async def answered(coroutine: Any) -> Any:
    """A query's answer; RunControlError (one line) when no worker gave it in time."""
    try:
        return await coroutine
    except RPCError as e:
        raise RunControlError(f"no worker answered for the run ({e.message})") from None


async def current_input(client: Client, run_id: str, execution: str) -> Any:
    """The input the run's current execution started with (an agent run's or a flow's), or None."""
    try:
        response = await client.workflow_service.get_workflow_execution_history(
            GetWorkflowExecutionHistoryRequest(
                namespace=client.namespace,
                execution=ProtoWorkflowExecution(workflow_id=run_id, run_id=execution),
                maximum_page_size=1,
            )
        )
        payloads = list(response.history.events[0].workflow_execution_started_event_attributes.input.payloads)
        (run,) = await client.data_converter.decode(payloads[:1], [AgentRunInput])
        return run
    except Exception:  # noqa: BLE001 - a flow's input, or one of another code's shape: nothing to take from it
        return None


async def steps_of(client: Client, run_id: str, since: int = 0) -> list[StepRecord]:
    """The run's step records after `since` from its `steps` query, page by page."""
    handle = client.get_workflow_handle_for(AgentWorkflow.run, run_id)
    records: list[StepRecord] = []
    while page := await answered(handle.query(AgentWorkflow.steps, since, rpc_timeout=QUERY_TIMEOUT)):
        records.extend(page)
        since = page[-1].step
    return records


async def status_of(client: Client, run_id: str) -> AgentStatus:
    handle = client.get_workflow_handle_for(AgentWorkflow.run, run_id)
    return await answered(handle.query(AgentWorkflow.status, rpc_timeout=QUERY_TIMEOUT))


async def working_status(client: Client, step_run: str | None) -> AgentStatus | None:
    """A flow's working step's status, if a worker gives it."""
    if step_run is None:
        return None
    try:
        return await status_of(client, step_run)
    except RunControlError:
        return None


async def plan_of(client: Client, run_id: str) -> Plan:
    return await answered(client.get_workflow_handle(run_id).query("plan", result_type=Plan, rpc_timeout=QUERY_TIMEOUT))


async def read_run(client: Client, run_id: str, since: int = 0) -> RunView:
    """Everything the run's page shows (RunControlError: no such run)."""
    description = await run_control.describe(client, run_id)
    view = RunView(run_id, description)
    task = asyncio.ensure_future(task_of(client, description))
    started = await current_input(client, run_id, description.run_id)
    view.workspace = (started.workspace if started is not None else None) or workspace_name_for(run_id)
    view.origin = started.forked_from if started is not None else None
    view.session = started is not None and started.session is not None
    try:
        await _fill(client, view, since)
    except RunControlError as e:
        view.unanswered = str(e)
    view.task = await task
    if len(view.records) > STEPS_SHOWN:
        view.older_left_out = len(view.records) - STEPS_SHOWN
        view.records = view.records[-STEPS_SHOWN:]
    return view


async def _fill(client: Client, view: RunView, since: int) -> None:
    run_id, description = view.run_id, view.description
    if not view.running and description.status in WITH_RESULT:
        view.result = await result_of(client, description)
    if view.is_flow:
        if view.result is not None:
            assert isinstance(view.result, PlanningFlowResult)
            view.plan = view.result.plan
        elif view.running:
            view.plan = await plan_of(client, run_id)
            view.working_step = run_control.working_step(view.plan)
            view.status = await working_status(client, view.working_step)
        return
    if isinstance(view.result, AgentRunResult):
        view.records = [r for r in view.result.steps if r.step > since]
        view.turns = view.result.turns
        return
    if not view.running:
        view.ended_line = await closed_line(client, view)
    # Running, or closed without a result: a worker answers (a closed run by replaying it).
    view.records = await steps_of(client, run_id, since)
    if view.running:
        view.status = await status_of(client, run_id)
    session: SessionView | None = await answered(
        client.get_workflow_handle_for(AgentWorkflow.run, run_id).query(AgentWorkflow.session, rpc_timeout=QUERY_TIMEOUT)
    )
    view.turns = session.turns if session is not None else []


async def closed_line(client: Client, view: RunView) -> str:
    try:
        await run_control.finished_result(client, view.run_id, view.description)
    except RunEnded as e:
        return str(e)
    except RunControlError as e:
        return str(e)
    return ""


@dataclass(frozen=True)
class LiveState:
    """What the event stream checks each second."""

    running: bool
    status: AgentStatus | None
    plan: Plan | None
    records: list[StepRecord]


async def live_state(client: Client, run_id: str, flow: bool, since: int) -> LiveState:
    """The run's state now and its steps after `since` (RunControlError: no worker answered)."""
    description = await run_control.describe(client, run_id)
    running = run_control.is_running(description)
    if flow:
        if not running:
            return LiveState(False, None, None, [])
        plan = await plan_of(client, run_id)
        return LiveState(True, await working_status(client, run_control.working_step(plan)), plan, [])
    if not running:
        return LiveState(False, None, None, [])
    records = await steps_of(client, run_id, since)
    return LiveState(True, await status_of(client, run_id), None, records)
