"""`list`: which run, what task, what state, what it wants; one row per run.

A run's search attributes alone cannot say that: AgentState reads FINISHED
for a run that gave up or spent its budget, and nothing on the server says
that a run waits for a person. So each row is completed from the run itself:
the task from its first execution's input, how a closed run ended from its
result, and what a running one waits for from its `status` query (which a
worker answers; with none, the row says "running")."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, AsyncGenerator, TextIO

from temporalio.api.common.v1 import WorkflowExecution as ProtoWorkflowExecution
from temporalio.api.history.v1 import HistoryEvent
from temporalio.api.workflowservice.v1 import (
    GetWorkflowExecutionHistoryRequest, GetWorkflowExecutionHistoryReverseRequest,
)
from temporalio.client import Client, WorkflowExecution, WorkflowExecutionStatus
from temporalio.service import RPCError

from agent_model.flow import PlanningFlowResult
from agent_model.outcome_words import Outcome, StateClass, outcome_of
from agent_model.payload_crypto import PayloadUnreadable
from agent_model.plan import Plan, StepStatus
from agent_model.run import AgentRunResult, AgentStatus
from workflows import search_attributes
from workflows.agent import AgentWorkflow
from workflows.planning import PlanningFlowWorkflow
from workflows.run_failure import result_in
from runtime.run_control import closed_state, is_flow, is_running, status_name
from runtime.terminal_text import inert
from runtime.user_errors import encrypted_without_key

LIST_LIMIT = 20
"""Runs shown by `list`, newest first."""
SCAN_LIMIT = 1000  # = runtime/command_line.py LIST_MAX
"""Executions read at most to fill a filtered list: a filter that matches
few runs ends there rather than reading the whole namespace."""
PROBE_TIMEOUT = timedelta(seconds=2)
"""How long a running run's worker may take to say what the run waits for."""
CONCURRENT_READS = 16
"""Runs read at once while rows are completed."""
TASK_MIN_WIDTH = 20
"""The task column is never cut below this, however narrow the terminal."""
WAITS_FOR_ANSWER = "waits for an answer"
WAITS_FOR_APPROVAL = "waits for approval"

CLOSED_WORDS: dict[WorkflowExecutionStatus, Outcome] = {
    WorkflowExecutionStatus.CANCELED: Outcome("cancelled", "the run was cancelled", StateClass.CANCELLED),
    WorkflowExecutionStatus.TERMINATED: Outcome("terminated", "the run was stopped by force", StateClass.FAILED),
    WorkflowExecutionStatus.TIMED_OUT: Outcome("timed out", "the run reached its time limit", StateClass.FAILED),
    WorkflowExecutionStatus.FAILED: Outcome("failed", "the run failed", StateClass.FAILED),
}
"""How a run that closed without a result ended (Temporal's status)."""
WITH_RESULT = (WorkflowExecutionStatus.COMPLETED, WorkflowExecutionStatus.FAILED)
"""Closed so, a run may have a result: a FAILED one whose task was not done carries it."""


@dataclass(frozen=True)
class RunRow:
    """One run as the list shows it."""

    run_id: str
    kind: str
    """The agent's name, or the flow's marker name."""
    task: str
    """The task, on one line ("" when its first execution is gone)."""
    state: str
    """The run's own state: the AgentState value, or for a run closed without
    a result Temporal's status (CANCELLED spelt as AgentState spells it)."""
    status: str
    """What the list shows: "running", "waits for an answer", "finished",
    "gave up", "error", "cancelled", "step limit", ..."""
    state_class: StateClass
    step: int | None
    started: datetime


def age(started: datetime, now: datetime) -> str:
    seconds = int((now - started).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def listing_query(state: StateClass | None) -> str:
    """Agent runs and flows, without the executions a long run continued from;
    open or closed ones only when the filter says which."""
    query = (
        f'(WorkflowType = "{AgentWorkflow.__name__}" OR WorkflowType = "{PlanningFlowWorkflow.__name__}") '
        'AND ExecutionStatus != "ContinuedAsNew"'
    )
    if state in (StateClass.RUNNING, StateClass.WAITING):
        return query + ' AND ExecutionStatus = "Running"'
    if state is not None:
        return query + ' AND ExecutionStatus != "Running"'
    return query


def newest(executions: list[WorkflowExecution]) -> WorkflowExecution:
    """Of one workflow id's executions (a rewound run, an id used again), the
    one that is the run now: the running one, else the last to close."""
    running = [e for e in executions if is_running(e)]
    if running:
        return running[0]
    return max(executions, key=lambda e: e.close_time or e.start_time)


async def _one_event(client: Client, run: WorkflowExecution, *, first: bool) -> HistoryEvent | None:
    """The first event of the run's first execution, or the last of this one."""
    try:
        if first:
            first_run = run.raw_info.first_run_id or run.run_id
            response: Any = await client.workflow_service.get_workflow_execution_history(
                GetWorkflowExecutionHistoryRequest(
                    namespace=client.namespace,
                    execution=ProtoWorkflowExecution(workflow_id=run.id, run_id=first_run),
                    maximum_page_size=1,
                )
            )
        else:
            response = await client.workflow_service.get_workflow_execution_history_reverse(
                GetWorkflowExecutionHistoryReverseRequest(
                    namespace=client.namespace,
                    execution=ProtoWorkflowExecution(workflow_id=run.id, run_id=run.run_id),
                    maximum_page_size=1,
                )
            )
    except RPCError:
        return None  # e.g. the first execution is past its retention
    return response.history.events[0] if response.history.events else None


ENCRYPTED_TASK = "(encrypted)"
"""The task column of a run whose input this command cannot open: it lacks the key (`show` and `result` say so)."""


async def task_of(client: Client, run: WorkflowExecution) -> str:
    """The run's task, from its first execution's input (later ones carry the
    run's state, and a continued execution has no summary)."""
    event = await _one_event(client, run, first=True)
    if event is None or not event.HasField("workflow_execution_started_event_attributes"):
        return ""
    payloads = list(event.workflow_execution_started_event_attributes.input.payloads)
    if not payloads:
        return ""
    try:
        (fields,) = await client.data_converter.decode(payloads[:1], [dict])
    except Exception as e:  # an input this code cannot read is a row without a task, not a failed list
        return ENCRYPTED_TASK if isinstance(e, PayloadUnreadable) or encrypted_without_key(e) else ""
    task = fields.get("task") if isinstance(fields, dict) else None
    return " ".join(task.split()) if isinstance(task, str) else ""


async def result_of(client: Client, run: WorkflowExecution) -> AgentRunResult | PlanningFlowResult | None:
    """A closed run's result, read from its last event: a completed run's, or
    the one a run that failed because its task was not done carries."""
    event = await _one_event(client, run, first=False)
    kind: type = PlanningFlowResult if is_flow(run) else AgentRunResult
    try:
        if event is not None and event.HasField("workflow_execution_failed_event_attributes"):
            failure = await client.data_converter.decode_failure(event.workflow_execution_failed_event_attributes.failure)
            return result_in(failure, kind)
        if event is None or not event.HasField("workflow_execution_completed_event_attributes"):
            return None
        payloads = list(event.workflow_execution_completed_event_attributes.result.payloads)
        (result,) = await client.data_converter.decode(payloads, [kind])
        return result
    except Exception:  # a result of another code's shape: the row falls back to the run's state
        return None


async def status_of(client: Client, run_id: str) -> AgentStatus | None:
    """An agent run's status from its worker; None when none answers in time."""
    try:
        return await client.get_workflow_handle_for(AgentWorkflow.run, run_id).query(
            AgentWorkflow.status, rpc_timeout=PROBE_TIMEOUT
        )
    except RPCError:
        return None


async def waits_for(client: Client, run: WorkflowExecution) -> str | None:
    """What a running run (for a flow: its working step) waits for from a
    person, if anything."""
    run_ids = [run.id]
    if is_flow(run):
        try:
            plan: Plan = await client.get_workflow_handle(run.id).query(
                "plan", result_type=Plan, rpc_timeout=PROBE_TIMEOUT
            )
        except RPCError:
            return None
        run_ids = [s.run_id for s in plan.steps if s.status == StepStatus.IN_PROGRESS and s.run_id]
    for status in await asyncio.gather(*(status_of(client, run_id) for run_id in run_ids)):
        if status is not None and status.pending_question is not None:
            return WAITS_FOR_ANSWER
        if status is not None and status.pending_approval is not None:
            return WAITS_FOR_APPROVAL
    return None


async def row_of(client: Client, run: WorkflowExecution) -> RunRow:
    attributes = run.typed_search_attributes
    kind = attributes.get(search_attributes.AGENT_NAME) or (search_attributes.FLOW_AGENT_NAME if is_flow(run) else "agent")
    state = attributes.get(search_attributes.AGENT_STATE) or status_name(run)
    step = attributes.get(search_attributes.AGENT_STEP)
    task = asyncio.ensure_future(task_of(client, run))
    if is_running(run):
        waiting = await waits_for(client, run)
        status, state_class = (waiting, StateClass.WAITING) if waiting else ("running", StateClass.RUNNING)
    else:
        result = await result_of(client, run) if run.status in WITH_RESULT else None
        if result is not None:
            outcome = outcome_of(result)
            if isinstance(result, AgentRunResult):
                state, step = result.state.value, result.steps_taken
        else:
            state = closed_state(run) if run.status != WorkflowExecutionStatus.COMPLETED else state
            outcome = (CLOSED_WORDS.get(run.status) if run.status else None) or Outcome(state.lower(), "", StateClass.FAILED)
        status, state_class = outcome.word, outcome.state_class
    return RunRow(run.id, kind, await task, state, status, state_class, step, run.start_time)


def selected(row: RunRow, state: StateClass | None) -> bool:
    if state is None or row.state_class == state:
        return True
    return state == StateClass.RUNNING and row.state_class == StateClass.WAITING


async def _by_workflow_id(client: Client, query: str) -> AsyncGenerator[list[list[WorkflowExecution]], None]:
    """Batches of workflow ids' executions, in the listing's order (newest
    first), each id once; reads at most SCAN_LIMIT executions."""
    seen: dict[str, list[WorkflowExecution]] = {}
    batch: list[str] = []
    scanned = 0
    async for run in client.list_workflows(query, page_size=100):
        scanned += 1
        if run.id in seen:
            seen[run.id].append(run)
        else:
            seen[run.id] = [run]
            batch.append(run.id)
        if len(batch) >= CONCURRENT_READS:
            yield [seen[run_id] for run_id in batch]
            batch = []
        if scanned >= SCAN_LIMIT:
            break
    if batch:
        yield [seen[run_id] for run_id in batch]


async def recent_runs(client: Client, limit: int = LIST_LIMIT, state: StateClass | None = None) -> list[RunRow]:
    """The newest `limit` runs and flows in `state` (all when None), newest
    first, one row per workflow id."""
    rows: list[RunRow] = []
    async with contextlib.aclosing(_by_workflow_id(client, listing_query(state))) as batches:
        async for batch in batches:
            found = await asyncio.gather(*(row_of(client, newest(executions)) for executions in batch))
            rows.extend(row for row in found if selected(row, state))
            if len(rows) >= limit:
                break
    return rows[:limit]


def table(rows: list[RunRow], now: datetime, width: int) -> list[str]:
    """The list's lines: a header and a row per run, the task last and cut to
    what is left of `width`."""
    cells: list[tuple[str, ...]] = [("RUN ID", "AGENT/FLOW", "STATE", "STEP", "AGE")]
    for run in rows:
        step = "" if run.step is None else str(run.step)
        cells.append(tuple(inert(cell) for cell in (run.run_id, run.kind, run.status, step, age(run.started, now))))
    widths = [max(len(r[i]) for r in cells) for i in range(len(cells[0]))]
    room = max(TASK_MIN_WIDTH, width - sum(widths) - 2 * len(widths))
    tasks = ["TASK", *(cut(inert(run.task), room) for run in rows)]
    return [
        "  ".join([*(cell.ljust(w) for cell, w in zip(row, widths)), task]).rstrip() for row, task in zip(cells, tasks)
    ]


def cut(text: str, room: int) -> str:
    return text if len(text) <= room else text[: room - 1] + "…"


def terminal_width() -> int:
    """The terminal's columns ($COLUMNS first; 120 when the output is not a terminal)."""
    return shutil.get_terminal_size((120, 24)).columns


async def list_runs(
    client: Client, out: TextIO, limit: int = LIST_LIMIT, state: StateClass | None = None, width: int | None = None
) -> None:
    rows = await recent_runs(client, limit, state)
    if not rows:
        print("no runs yet" if state is None else f"no {state.value} runs", file=out)
        return
    for line in table(rows, datetime.now(timezone.utc), width or terminal_width()):
        print(line, file=out)
