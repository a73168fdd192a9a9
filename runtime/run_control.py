"""Controlling runs that already exist: answer, cancel, list, show, result, rewind."""

from __future__ import annotations

import asyncio
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any, TextIO

from temporalio.api.common.v1 import WorkflowExecution as ProtoWorkflowExecution
from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
from temporalio.api.workflowservice.v1 import ResetWorkflowExecutionRequest
from temporalio.client import Client, WorkflowExecution, WorkflowExecutionDescription, WorkflowExecutionStatus
from temporalio.client import WorkflowHandle, WorkflowUpdateFailedError
from temporalio.service import RPCError, RPCStatusCode

from agent_model.flow import PlanningFlowResult
from agent_model.plan import Plan, StepStatus
from agent_model.run import AgentRunResult, HumanAnswer, HumanQuestion, StepRecord
from agent_model.think_context import CONTEXT_MISSING_ERROR
from workflows import search_attributes
from workflows.agent import AgentWorkflow
from workflows.planning import PlanningFlowWorkflow

LIST_LIMIT = 20
"""Runs shown by --list, newest first."""
TRANSCRIPT_OBSERVATION_LIMIT = 2000
"""Characters of each tool observation shown by --show."""
QUERY_TIMEOUT = timedelta(seconds=10)
"""How long a query waits for a worker to answer it."""


class RunControlError(Exception):
    """A request about a run that cannot be honoured; one line for the user."""


async def describe(client: Client, run_id: str) -> WorkflowExecutionDescription:
    try:
        return await client.get_workflow_handle(run_id).describe()
    except RPCError as e:
        if e.status == RPCStatusCode.NOT_FOUND:
            raise RunControlError(f"no run with id {run_id!r}") from None
        raise


async def query(handle: WorkflowHandle, name: Any, *args: Any, **options: Any) -> Any:
    """The answer to a query; no worker to answer it is one line for the user."""
    try:
        return await handle.query(name, *args, rpc_timeout=QUERY_TIMEOUT, **options)
    except RPCError as e:
        raise RunControlError(
            f"run {handle.id} did not answer ({e.message}); is a worker running? Start one with: python worker.py"
        ) from None


def is_flow(run: WorkflowExecution) -> bool:
    return run.workflow_type == PlanningFlowWorkflow.__name__


def result_type(description: WorkflowExecutionDescription) -> type:
    return PlanningFlowResult if is_flow(description) else AgentRunResult


def is_running(run: WorkflowExecution) -> bool:
    return run.status == WorkflowExecutionStatus.RUNNING


async def search_attributes_registered(client: Client) -> bool:
    """True when the namespace knows every attribute the workflows publish."""
    try:
        response = await client.operator_service.list_search_attributes(
            ListSearchAttributesRequest(namespace=client.namespace)
        )
    except RPCError:
        return False
    return all(key.name in response.custom_attributes for key in search_attributes.ALL)


# ---- answer ----------------------------------------------------------------------


async def question_target(client: Client, run_id: str) -> tuple[WorkflowHandle, HumanQuestion]:
    """The run (the flow's working child, for a flow) and its waiting question."""
    description = await describe(client, run_id)
    if not is_running(description):
        raise RunControlError(f"run {run_id} has ended ({description.status.name}); nothing to answer")
    if is_flow(description):
        plan: Plan = await query(client.get_workflow_handle(run_id), "plan", result_type=Plan)
        working = [s.run_id for s in plan.steps if s.status == StepStatus.IN_PROGRESS and s.run_id]
        if not working:
            raise RunControlError(f"flow {run_id} has no step running, so no question is waiting")
        run_id = working[0]
    handle = client.get_workflow_handle_for(AgentWorkflow.run, run_id)
    question = await query(handle, AgentWorkflow.pending_question)
    if question is None:
        raise RunControlError(f"run {run_id} has no question waiting for an answer")
    return handle, question


async def answer(client: Client, run_id: str, text: str, out: TextIO) -> None:
    if not text.strip():
        raise RunControlError("the answer is empty")
    handle, question = await question_target(client, run_id)
    try:
        await handle.execute_update(AgentWorkflow.answer, HumanAnswer(question_id=question.id, text=text))
    except WorkflowUpdateFailedError as e:
        raise RunControlError(f"answer refused: {e.cause}") from None
    print(f"answered question {question.id} of {handle.id}: {question.text}", file=out)


# ---- cancel ----------------------------------------------------------------------


async def cancel(client: Client, run_id: str, out: TextIO, wait_seconds: float = 30.0) -> None:
    description = await describe(client, run_id)
    if not is_running(description):
        raise RunControlError(f"run {run_id} has already ended ({description.status.name})")
    handle = client.get_workflow_handle(run_id, result_type=result_type(description))
    await handle.cancel()
    print(f"cancellation of {run_id} requested", file=out)
    try:
        result = await asyncio.wait_for(handle.result(), wait_seconds)
    except asyncio.TimeoutError:
        print("the run has not ended yet (is a worker running?); it will end when a worker picks it up", file=out)
        return
    state = result.outcome.value if isinstance(result, PlanningFlowResult) else result.state.value
    print(f"run {run_id} ended: {state}", file=out)


# ---- list ------------------------------------------------------------------------


def age(started: datetime, now: datetime) -> str:
    seconds = int((now - started).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


async def list_runs(client: Client, out: TextIO, limit: int = LIST_LIMIT) -> None:
    query = f'WorkflowType = "{AgentWorkflow.__name__}" OR WorkflowType = "{PlanningFlowWorkflow.__name__}"'
    now = datetime.now(timezone.utc)
    rows = [("RUN ID", "AGENT/FLOW", "STATE", "STEP", "AGE")]
    async for run in client.list_workflows(query, limit=limit):
        attributes = run.typed_search_attributes
        kind = attributes.get(search_attributes.AGENT_NAME) or (
            search_attributes.FLOW_AGENT_NAME if is_flow(run) else "agent"
        )
        state = attributes.get(search_attributes.AGENT_STATE)
        if not is_running(run) and run.status != WorkflowExecutionStatus.COMPLETED:
            state = run.status.name  # terminated, timed out, failed: Temporal's word is the truth
        step = attributes.get(search_attributes.AGENT_STEP)
        rows.append((run.id, kind, state or run.status.name, "" if step is None else str(step), age(run.start_time, now)))
    if len(rows) == 1:
        print("no runs yet", file=out)
        return
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip(), file=out)


# ---- show and result -----------------------------------------------------------------


def transcript(records: list[StepRecord]) -> str:
    lines: list[str] = []
    for record in records:
        usage = record.usage
        lines.append(f"── step {record.step} ── {usage.prompt_tokens}+{usage.completion_tokens} tokens")
        if record.thought:
            lines.append(f"thought: {record.thought.strip()}")
        for call in record.tool_calls:
            lines.append(f"→ {call.name}({call.arguments})")
            observation = call.observation
            if len(observation) > TRANSCRIPT_OBSERVATION_LIMIT:
                observation = observation[:TRANSCRIPT_OBSERVATION_LIMIT] + " …"
            marker = "✗" if call.error else "←"
            lines.extend(f"  {marker} {line}" for line in observation.splitlines() or [""])
        if record.note:
            lines.append(f"note: {record.note}")
    return "\n".join(lines)


async def records_of(client: Client, run_id: str) -> list[StepRecord]:
    description = await describe(client, run_id)
    if not is_running(description):
        return (await finished_result(client, run_id, description)).steps
    handle = client.get_workflow_handle_for(AgentWorkflow.run, run_id)
    records: list[StepRecord] = []
    while page := await query(handle, AgentWorkflow.steps, len(records)):  # one page per answer
        records.extend(page)
    return records


async def finished_result(client: Client, run_id: str, description: WorkflowExecutionDescription | None = None):
    description = description or await describe(client, run_id)
    if is_running(description):
        raise RunControlError(f"run {run_id} is still running")
    handle = client.get_workflow_handle(run_id, result_type=result_type(description))
    try:
        return await handle.result()
    except Exception as e:  # terminated, timed out, failed: no result to show
        raise RunControlError(f"run {run_id} ended without a result ({description.status.name}): {e}") from None


async def show(client: Client, run_id: str, out: TextIO) -> None:
    description = await describe(client, run_id)
    if is_flow(description):
        plan: Plan = (
            await query(client.get_workflow_handle(run_id), "plan", result_type=Plan)
            if is_running(description)
            else (await finished_result(client, run_id, description)).plan
        )
        print(plan.render(), file=out)
        runs = [f"step {i + 1}: {s.run_id}" for i, s in enumerate(plan.steps) if s.run_id]
        if runs:
            print("\nStep runs (show each with --show ID):\n" + "\n".join(runs), file=out)
        return
    print(transcript(await records_of(client, run_id)) or "(no step finished yet)", file=out)


# ---- rewind ----------------------------------------------------------------------------


async def rewind(client: Client, run_id: str, to_step: int, out: TextIO) -> str:
    """Reset the run to the workflow task that started step `to_step + 1`: steps
    1..to_step are kept (replayed, not re-run); the rest runs again with the
    current worker code. Returns the new run's run id."""
    description = await describe(client, run_id)
    if is_flow(description):
        raise RunControlError("rewind works on agent runs, not on a planning flow")
    if description.parent_id:
        raise RunControlError(f"run {run_id} is a step of flow {description.parent_id}; rewind works on top-level runs")
    history = await client.get_workflow_handle(run_id).fetch_history()
    # A think that found its worker without the run's context was sent again
    # whole; the resend, not the miss, is that step's think.
    context_misses = {
        e.activity_task_failed_event_attributes.scheduled_event_id
        for e in history.events
        if e.HasField("activity_task_failed_event_attributes")
        and e.activity_task_failed_event_attributes.failure.application_failure_info.type == CONTEXT_MISSING_ERROR
    }
    think_scheduled = [
        e
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
        and e.activity_task_scheduled_event_attributes.activity_type.name == "think"
        and e.event_id not in context_misses
    ]
    steps = len(think_scheduled)
    if not 0 <= to_step < steps:
        raise RunControlError(
            f"run {run_id} has {steps} step(s) that reached the model; --to-step must be from 0 to {steps - 1}"
        )
    decided_by = think_scheduled[to_step].activity_task_scheduled_event_attributes.workflow_task_completed_event_id
    response = await client.workflow_service.reset_workflow_execution(
        ResetWorkflowExecutionRequest(
            namespace=client.namespace,
            workflow_execution=ProtoWorkflowExecution(workflow_id=run_id, run_id=description.run_id),
            reason=f"durable-manus rewind to the end of step {to_step}",
            workflow_task_finish_event_id=decided_by,
            request_id=str(uuid.uuid4()),
        )
    )
    print(f"rewound {run_id} to the end of step {to_step}: new run {response.run_id}", file=out)
    return response.run_id
