"""Controlling runs that already exist: answer, cancel, list, show, result, rewind."""

from __future__ import annotations

import asyncio
import os
import uuid
from datetime import timedelta
from typing import Any, NamedTuple, TextIO

from temporalio.api.common.v1 import WorkflowExecution as ProtoWorkflowExecution
from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
from temporalio.api.workflowservice.v1 import GetWorkflowExecutionHistoryReverseRequest, ResetWorkflowExecutionRequest
from temporalio.api.history.v1 import HistoryEvent, WorkflowExecutionStartedEventAttributes
from temporalio.client import Client, WorkflowExecution, WorkflowExecutionDescription, WorkflowExecutionStatus
from temporalio.client import WorkflowHistory
from temporalio.client import WorkflowFailureError, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.exceptions import CancelledError, TerminatedError, TimeoutError as WorkflowTimeoutError
from temporalio.converter import DataConverter
from temporalio.service import RPCError, RPCStatusCode

from agent_model.budget import money
from agent_model.flow import PlanningFlowResult
from agent_model.plan import Plan, StepStatus
from agent_model.payload import PAYLOAD_LIMIT, first_within
from agent_model.run import AgentRunInput, AgentRunResult, AgentStatus, HumanAnswer, HumanQuestion, StepRecord
from agent_model.session import SessionView, TurnRecord
from agent_model.state import AgentState
from agent_model.errors import CONTEXT_MISSING_ERROR
from agent_model.workspace_names import workspace_name_for
from config.settings import ConfigError
from config import environment
from workflows import search_attributes
from workflows.agent import AgentWorkflow
from workflows.planning import PlanningFlowWorkflow
from runtime.rewind_files import restore_for_rewind
from runtime.run_result import ended_result
from runtime.tasks import let_go
from runtime.terminal_text import inert
from runtime.user_errors import RunControlError, RunEnded

TRANSCRIPT_OBSERVATION_LIMIT = 2000
"""Characters of each tool observation shown by --show."""
QUERY_TIMEOUT = timedelta(seconds=10)
"""How long a query waits for a worker to answer it, unless $DURABLE_MANUS_QUERY_WAIT says otherwise."""
QUERY_WAIT_VARIABLE = "DURABLE_MANUS_QUERY_WAIT"
QUERY_NOTICE_SECONDS = 2.0
"""A query not answered this soon gets a line saying what it waits for."""
PROBE_TIMEOUT = timedelta(seconds=3)
"""How long a live worker may take to answer a probing query."""
WORKER_HINT = "python worker.py"


async def describe(client: Client, run_id: str) -> WorkflowExecutionDescription:
    try:
        return await client.get_workflow_handle(run_id).describe()
    except RPCError as e:
        if e.status == RPCStatusCode.NOT_FOUND:
            raise RunControlError(f"no run with id {run_id!r}") from None
        raise


async def query(handle: WorkflowHandle, name: Any, *args: Any, out: TextIO | None = None, **options: Any) -> Any:
    """The answer to a query; no worker to answer it is one line for the user.
    When the answer is slow, a line on `out` says what the command waits for."""
    timeout = query_timeout()
    asking = asyncio.ensure_future(handle.query(name, *args, rpc_timeout=timeout, **options))
    try:
        done, _ = await asyncio.wait({asking}, timeout=QUERY_NOTICE_SECONDS)
        if not done and out is not None:
            print(
                f"waiting up to {timeout.total_seconds():.0f} s for a worker to answer for run {handle.id} "
                f"(none may be running; start one with: {WORKER_HINT})",
                file=out,
                flush=True,
            )
        return await asking
    except RPCError as e:
        raise RunControlError(
            f"run {handle.id} did not answer ({e.message}); is a worker running? Start one with: {WORKER_HINT}"
        ) from None
    finally:
        let_go(asking)


def query_timeout() -> timedelta:
    """QUERY_TIMEOUT, or $DURABLE_MANUS_QUERY_WAIT seconds (config/environment.py):
    a wait window that tests of a run nobody answers shorten."""
    seconds = environment.read(os.environ, QUERY_WAIT_VARIABLE)
    return QUERY_TIMEOUT if seconds is None else timedelta(seconds=seconds)


async def worker_answers(client: Client, run_id: str, timeout: timedelta = PROBE_TIMEOUT) -> bool:
    """True when a worker answers a query for the run within `timeout`: fresh
    evidence that one is alive for it (or when there is no such run: then the
    command's own error says so)."""
    try:
        await client.get_workflow_handle(run_id).query("__temporal_workflow_metadata", rpc_timeout=timeout)
    except RPCError as e:
        return e.status in (RPCStatusCode.NOT_FOUND, RPCStatusCode.INVALID_ARGUMENT)
    return True


def is_flow(run: WorkflowExecution) -> bool:
    return run.workflow_type == PlanningFlowWorkflow.__name__


def result_type(description: WorkflowExecutionDescription) -> type:
    return PlanningFlowResult if is_flow(description) else AgentRunResult


def is_running(run: WorkflowExecution) -> bool:
    return run.status == WorkflowExecutionStatus.RUNNING


def status_name(run: WorkflowExecution) -> str:
    return run.status.name if run.status else "UNKNOWN"


def closed_state(run: WorkflowExecution) -> str:
    """The state of a run that closed without a result: Temporal's word for
    how it ended (terminated, timed out, failed), and one spelling for cancelled."""
    if run.status == WorkflowExecutionStatus.CANCELED:
        return AgentState.CANCELLED.value
    return status_name(run)


async def search_attributes_registered(client: Client) -> bool:
    """True when the namespace knows every attribute the workflows publish."""
    try:
        response = await client.operator_service.list_search_attributes(
            ListSearchAttributesRequest(namespace=client.namespace)
        )
    except RPCError:
        return False
    return all(key.name in response.custom_attributes for key in search_attributes.ALL)


# ---- how a run ended without a result ------------------------------------------

SERVER_LIMITS = {
    "Workflow history size exceeds limit.": "the server's history size limit (limit.historySize.error, 50 MB by default)",
    "Workflow history count exceeds limit.": "the server's history length limit (limit.historyCount.error, 51,200 events by default)",
    "Workflow mutable state size exceeds limit.": "the server's mutable state size limit (limit.mutableStateSize.error)",
}
"""Termination reasons the server writes when a run outgrows a limit, and the limit."""


def one_line(text: object) -> str:
    return " ".join(str(text).split())


async def terminated_by(client: Client, run_id: str) -> str | None:
    """Who terminated the run, from its last event (read without the rest of a
    history that may be 50 MB)."""
    try:
        response = await client.workflow_service.get_workflow_execution_history_reverse(
            GetWorkflowExecutionHistoryReverseRequest(
                namespace=client.namespace,
                execution=ProtoWorkflowExecution(workflow_id=run_id),
                maximum_page_size=1,
            )
        )
    except RPCError:
        return None
    for event in response.history.events:
        if event.HasField("workflow_execution_terminated_event_attributes"):
            return event.workflow_execution_terminated_event_attributes.identity or None
    return None


def timeout_bound(description: WorkflowExecutionDescription) -> str:
    config = description.raw_description.execution_config
    for name, duration in (("execution", config.workflow_execution_timeout), ("run", config.workflow_run_timeout)):
        if duration.ToTimedelta():
            return f"its {name} timeout of {duration.ToTimedelta().total_seconds():.0f} s"
    return "its time limit"


async def ended_line(
    client: Client, run_id: str, error: WorkflowFailureError, description: WorkflowExecutionDescription | None = None
) -> str:
    """One line saying why a run has no result: cancelled, terminated (by whom,
    and the limit when the server did it), timed out (after which bound), failed."""
    cause = error.cause
    if isinstance(cause, CancelledError):
        return f"run {run_id} was cancelled"
    if isinstance(cause, TerminatedError):
        reason = one_line(cause.message) or "no reason given"
        limit = SERVER_LIMITS.get(reason)
        if limit:
            return f"run {run_id} was terminated by the Temporal server: {reason} It hit {limit}."
        who = await terminated_by(client, run_id)
        return f"run {run_id} was terminated{f' by {who}' if who else ''}: {reason}"
    if isinstance(cause, WorkflowTimeoutError):
        try:
            description = description or await client.get_workflow_handle(run_id).describe()
            bound = timeout_bound(description)
        except RPCError:
            bound = "its time limit"
        return f"run {run_id} timed out: it reached {bound}"
    failure = cause or error
    kind = getattr(failure, "type", None) or type(failure).__name__
    return f"run {run_id} failed: {kind}: {one_line(getattr(failure, 'message', None) or failure)}"


async def result_within(handle: WorkflowHandle, seconds: float, kind: type = AgentRunResult) -> Any:
    """What the run ends with within `seconds`: its result (also of a run that
    failed because its task was not done), or the WorkflowFailureError it
    ended with (no result); None when it has not ended."""
    try:
        return await asyncio.wait_for(ended_result(handle, kind), seconds)
    except asyncio.TimeoutError:
        return None
    except WorkflowFailureError as e:
        return e


# ---- answer ----------------------------------------------------------------------


def working_step(plan: Plan) -> str | None:
    """The run id of the flow's step in progress, if one is."""
    return next((s.run_id for s in plan.steps if s.status == StepStatus.IN_PROGRESS and s.run_id), None)


async def working_run(client: Client, run_id: str, what: str, out: TextIO | None = None) -> str:
    """The agent run that can take `what` ("a question", "a call"): the run
    itself, or a flow's working step; an ended run or an idle flow is a
    RunControlError."""
    description = await describe(client, run_id)
    if not is_running(description):
        raise RunControlError(f"run {run_id} has ended ({status_name(description)}); no {what} waits")
    if not is_flow(description):
        return run_id
    plan: Plan = await query(client.get_workflow_handle(run_id), "plan", result_type=Plan, out=out)
    working = working_step(plan)
    if working is None:
        raise RunControlError(f"flow {run_id} has no step running, so no {what} waits")
    return working


async def question_target(client: Client, run_id: str, out: TextIO | None = None) -> tuple[WorkflowHandle, HumanQuestion]:
    """The run (the flow's working child, for a flow) and its waiting question."""
    return await waiting_question(client, await working_run(client, run_id, "question", out), out)


async def waiting_question(client: Client, run_id: str, out: TextIO | None = None) -> tuple[WorkflowHandle, HumanQuestion]:
    """An agent run and the question it waits on."""
    handle = client.get_workflow_handle_for(AgentWorkflow.run, run_id)
    question = await query(handle, AgentWorkflow.pending_question, out=out)
    if question is None:
        raise RunControlError(f"run {run_id} has no question waiting for an answer")
    return handle, question


async def deliver_answer(
    client: Client, run_id: str, text: str, out: TextIO | None = None
) -> tuple[str, HumanQuestion]:
    """Answer the question the run (or the flow's working step) waits on;
    returns the id of the run that took the answer, and the question."""
    if not text.strip():
        raise RunControlError("the answer is empty")
    handle, question = await question_target(client, run_id, out)
    try:
        await handle.execute_update(AgentWorkflow.answer, HumanAnswer(question_id=question.id, text=text))
    except WorkflowUpdateFailedError as e:
        raise RunControlError(f"answer refused: {e.cause}") from None
    return handle.id, question


async def answer(client: Client, run_id: str, text: str, out: TextIO) -> None:
    answered, question = await deliver_answer(client, run_id, text, out)
    print(inert(f"answered question {question.id} of {answered}: {question.text}"), file=out)


# ---- cancel ----------------------------------------------------------------------


async def cancel(client: Client, run_id: str, out: TextIO, wait_seconds: float = 30.0) -> bool:
    """Cancel the run and wait up to `wait_seconds` for it to end; True when it did."""
    description = await describe(client, run_id)
    if not is_running(description):
        raise RunControlError(f"run {run_id} has already ended ({status_name(description)})")
    handle = client.get_workflow_handle(run_id, result_type=result_type(description))
    await handle.cancel()
    print(f"cancellation of {run_id} requested; waiting up to {wait_seconds:.0f} s for the run to end", file=out, flush=True)
    result = await result_within(handle, wait_seconds, result_type(description))
    if result is None:
        print(
            f"the run has not ended yet; it ends when a worker takes the cancellation (is one running? {WORKER_HINT})",
            file=out,
        )
        return False
    if isinstance(result, WorkflowFailureError):
        if isinstance(result.cause, CancelledError):
            print(f"run {run_id} ended: {AgentState.CANCELLED.value}", file=out)
        else:
            print(inert(await ended_line(client, run_id, result)), file=out)
        return True
    state = result.outcome.value if isinstance(result, PlanningFlowResult) else result.state.value
    print(f"run {run_id} ended: {state}", file=out)
    return True


# ---- show and result -----------------------------------------------------------------


def transcript(records: list[StepRecord], turns: list[TurnRecord] | None = None) -> str:
    """The steps, each turn of a session under a header with its message."""
    lines: list[str] = []
    messages = {turn.turn: turn.message for turn in turns or []}
    turn_shown = None
    for record in records:
        if (messages or record.turn > 1) and record.turn != turn_shown:
            turn_shown = record.turn
            message = " ".join(messages.get(record.turn, "").split())
            lines.append(f"══ turn {record.turn}: {message} ══" if message else f"══ turn {record.turn} ══")
        usage = record.usage
        cost = "" if record.cost is None else f", {money(record.cost)}"
        lines.append(f"── step {record.step} ── {usage.prompt_tokens}+{usage.completion_tokens} tokens{cost}")
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


async def records_of(client: Client, run_id: str, out: TextIO | None = None) -> list[StepRecord]:
    description = await describe(client, run_id)
    if not is_running(description):
        return (await finished_result(client, run_id, description)).steps
    handle = client.get_workflow_handle_for(AgentWorkflow.run, run_id)
    records: list[StepRecord] = []
    since = 0
    while page := await query(handle, AgentWorkflow.steps, since, out=None if records else out):  # one page per answer
        records.extend(page)
        since = page[-1].step
    return records


class StepsPage(NamedTuple):
    records: list[StepRecord]
    more: bool
    """Whether the run has records after these."""


async def steps_page(
    client: Client, run_id: str, since: int = 0, limit: int = PAYLOAD_LIMIT, out: TextIO | None = None
) -> StepsPage:
    """The records of an agent run's steps after step `since`, as many as fit
    in `limit` bytes of JSON (and in one query answer), and whether more follow."""
    description = await describe(client, run_id)
    if is_flow(description):
        raise RunControlError(f"run {run_id} is a planning flow; its steps are agent runs of their own")
    if not is_running(description):
        try:
            records = (await finished_result(client, run_id, description)).steps
        except RunEnded:
            pass  # no result to read them from: a worker answers for the closed run, replaying it
        else:
            after = [r for r in records if r.step > since]
            page = first_within(after, limit)
            return StepsPage(page, len(page) < len(after))
    handle = client.get_workflow_handle_for(AgentWorkflow.run, run_id)
    answered: list[StepRecord] = await query(handle, AgentWorkflow.steps, since, out=out)
    page = first_within(answered, limit)
    if not page:
        return StepsPage(page, False)
    if len(page) < len(answered):
        return StepsPage(page, True)
    status: AgentStatus = await query(handle, AgentWorkflow.status, out=out)
    return StepsPage(page, status.steps_recorded > page[-1].step)


async def finished_result(client: Client, run_id: str, description: WorkflowExecutionDescription | None = None):
    description = description or await describe(client, run_id)
    if is_running(description):
        raise RunControlError(f"run {run_id} is still running")
    handle = client.get_workflow_handle(run_id, result_type=result_type(description))
    try:
        return await ended_result(handle, result_type(description))
    except WorkflowFailureError as e:
        raise RunEnded(await ended_line(client, run_id, e, description)) from None


async def show(client: Client, run_id: str, out: TextIO) -> None:
    description = await describe(client, run_id)
    if is_flow(description):
        plan: Plan = (
            await query(client.get_workflow_handle(run_id), "plan", result_type=Plan, out=out)
            if is_running(description)
            else (await finished_result(client, run_id, description)).plan
        )
        print(inert(plan.render(first_number=1)), file=out)
        runs = [f"step {i + 1}: {s.run_id}" for i, s in enumerate(plan.steps) if s.run_id]
        if runs:
            print(inert("\nStep runs (show each with: python starter.py show ID):\n" + "\n".join(runs)), file=out)
        working = working_step(plan) if is_running(description) else None
        if working is not None:
            step: AgentStatus = await query(client.get_workflow_handle_for(AgentWorkflow.run, working), AgentWorkflow.status, out=out)
            if step.pending_question is not None:
                print(inert(waiting_question_lines(working, step.pending_question, True)), file=out)
        return
    records = await records_of(client, run_id, out)
    text = inert(transcript(records, await turns_of(client, run_id)))
    status: AgentStatus | None = None
    if is_running(description):
        status = await query(client.get_workflow_handle_for(AgentWorkflow.run, run_id), AgentWorkflow.status, out=out)
    # A gated call is shown after this, by approvals.show_pending.
    waits = status is not None and (status.pending_question is not None or status.pending_approval is not None)
    if text or not waits:
        print(text or "(no step finished yet)", file=out)
    if status is not None and status.pending_question is not None:
        print(inert(waiting_question_lines(run_id, status.pending_question, bool(text))), file=out)


def waiting_question_lines(run_id: str, question: HumanQuestion, after_steps: bool) -> str:
    """What `show` says of a run waiting for an answer."""
    gap = "\n" if after_steps else ""
    return (
        f"{gap}? question {question.id} waits for an answer: {question.text}\n"
        f'answer with: python starter.py answer {run_id} "..."'
    )


async def turns_of(client: Client, run_id: str) -> list[TurnRecord]:
    """A session's turns (empty for a run that is no session)."""
    description = await describe(client, run_id)
    if not is_running(description):
        try:
            return (await finished_result(client, run_id, description)).turns
        except RunEnded:
            return []
    view: SessionView | None = await query(client.get_workflow_handle_for(AgentWorkflow.run, run_id), AgentWorkflow.session)
    return view.turns if view is not None else []


# ---- rewind ----------------------------------------------------------------------------


async def execution_start(client: Client, history: WorkflowHistory) -> tuple[int, str]:
    """(steps taken before this execution of an agent run, the run id of the
    execution it continued from, or "")."""
    started = history.events[0].workflow_execution_started_event_attributes
    run = await started_run_input(client, history)
    return (run.carried.step if run.carried else 0), started.continued_execution_run_id


async def started_run_input(client: Client, history: WorkflowHistory) -> AgentRunInput:
    """The input an execution of an agent run started with."""
    return await run_input_of(client.data_converter, history.events[0].workflow_execution_started_event_attributes)


async def run_input_of(converter: DataConverter, started: WorkflowExecutionStartedEventAttributes) -> AgentRunInput:
    """An agent run's input from its execution's first event, decoded as the
    client decodes any payload (through the payload codec when encryption is on)."""
    (run,) = await converter.decode(list(started.input.payloads), [AgentRunInput])
    return run


def step_thinks(history: WorkflowHistory) -> list[HistoryEvent]:
    """The think scheduled for each step of one execution, in order."""
    # A think that found its worker without the run's context was sent again
    # whole; the resend, not the miss, is that step's think.
    context_misses = {
        e.activity_task_failed_event_attributes.scheduled_event_id
        for e in history.events
        if e.HasField("activity_task_failed_event_attributes")
        and e.activity_task_failed_event_attributes.failure.application_failure_info.type == CONTEXT_MISSING_ERROR
    }
    return [
        e
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
        and e.activity_task_scheduled_event_attributes.activity_type.name == "think"
        and e.event_id not in context_misses
    ]


async def rewind(client: Client, run_id: str, to_step: int, out: TextIO) -> str:
    """Reset the run to the workflow task that started step `to_step + 1`: steps
    1..to_step are kept (replayed, not re-run); the rest runs again with the
    current worker code. Returns the new run's run id."""
    description = await describe(client, run_id)
    if is_flow(description):
        raise RunControlError("rewind works on agent runs, not on a planning flow")
    if description.parent_id:
        raise RunControlError(f"run {run_id} is a step of flow {description.parent_id}; rewind works on top-level runs")
    # A long run is a chain of executions (continue-as-new): find the one in
    # which step to_step + 1 began, from the newest back.
    execution, steps_reached = description.run_id, None
    while True:
        history = await client.get_workflow_handle(run_id, run_id=execution).fetch_history()
        steps_before, continued_from = await execution_start(client, history)
        thinks = step_thinks(history)
        if steps_reached is None:
            steps_reached = steps_before + len(thinks)
        if to_step >= steps_before or not continued_from:
            break
        execution = continued_from
    started = await started_run_input(client, history)
    first = started.forked_from.step if started.forked_from else 0  # a fork's history begins there
    if not first <= to_step < steps_reached or to_step - steps_before >= len(thinks):
        raise RunControlError(
            f"run {run_id} has {steps_reached} step(s) that reached the model; "
            f"--to-step must be from {first} to {steps_reached - 1}"
            + (f" (it is a fork, begun at step {first})" if first else "")
        )
    await restore_for_rewind(
        client, run_id, started.workspace or workspace_name_for(run_id), to_step, description.task_queue, out
    )
    decided_by = thinks[to_step - steps_before].activity_task_scheduled_event_attributes.workflow_task_completed_event_id
    response = await client.workflow_service.reset_workflow_execution(
        ResetWorkflowExecutionRequest(
            namespace=client.namespace,
            workflow_execution=ProtoWorkflowExecution(workflow_id=run_id, run_id=execution),
            reason=f"durable-manus rewind to the end of step {to_step}",
            workflow_task_finish_event_id=decided_by,
            request_id=str(uuid.uuid4()),
        )
    )
    print(f"rewound {run_id} to the end of step {to_step}: new run {response.run_id}", file=out)
    return response.run_id
