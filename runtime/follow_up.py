"""Sending a follow-up message to a run (docs/sessions.md): to an open session
by the `send_message` update, to a closed run by a new execution of the same
workflow id that starts from the closed run's state. The CLI's `chat` and the
MCP server's `send_message` both send through here."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import timedelta
from typing import TextIO

from temporalio.api.common.v1 import WorkflowExecution as ProtoWorkflowExecution
from temporalio.api.workflowservice.v1 import GetWorkflowExecutionHistoryRequest
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHistory, WorkflowFailureError, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.common import WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from agent_model.continuation import continued_input, current_limits
from agent_model.run import AgentRunInput, AgentRunResult, RunState
from agent_model.session import SessionMessage, SessionTerms, SessionView, TurnRecord, reopened
from agent_model.workspace_names import workspace_name_for
from config.settings import Settings
from runtime import run_control
from runtime.run_result import ended_result
from runtime.run_start import summary_of
from runtime.user_errors import RunControlError, UsageError
from workflows import search_attributes
from workflows.agent import AgentWorkflow

ENDING_HINT = "is ending"
"""In the refusal of a session that decided to end: the follow-up goes on with it as a closed run."""


@dataclass(frozen=True)
class Delivery:
    """Where a follow-up went: the run (followed from here on), the turn it
    begins, and what the run replied."""

    client: Client
    handle: WorkflowHandle
    turn: int
    reply: str


def check_message(text: str, terms: SessionTerms) -> None:
    """One line for a message no run would take (before any server is asked)."""
    if not text.strip():
        raise UsageError("the message is empty")
    if len(text) > terms.message_limit:
        raise UsageError(
            f"the message has {len(text)} characters, over [session] message_chars = {terms.message_limit}; shorten it"
        )


def agent_handle(client: Client, run_id: str) -> WorkflowHandle:
    return client.get_workflow_handle(run_id, result_type=AgentRunResult)


async def deliver(client: Client, settings: Settings, run_id: str, text: str, out: TextIO | None = None) -> Delivery:
    """Send `text` to run `run_id` as its next turn (raises RunControlError
    with one line when the run cannot take it)."""
    check_message(text, settings.session.terms())
    for _ in range(3):  # an open session may close, or a closed run reopen, between two looks
        description = await run_control.describe(client, run_id)
        refuse_non_target(description, run_id)
        if run_control.is_running(description):
            delivered = await to_open_run(client, run_id, text)
        elif description.status in (WorkflowExecutionStatus.COMPLETED, WorkflowExecutionStatus.FAILED):
            # FAILED too: a run whose task was not done ends so, its state kept (workflows/run_failure.py).
            delivered = await to_closed_run(client, settings, run_id, description.run_id, text, out)
        else:
            raise RunControlError(
                f"run {run_id} ended {run_control.closed_state(description)}; only a run that completed "
                f"(finished, or a session that went idle) takes a follow-up"
            )
        if delivered is not None:
            return delivered
    raise RunControlError(f"run {run_id} kept changing between open and closed; try again")


def refuse_non_target(description, run_id: str) -> None:
    if run_control.is_flow(description):
        raise RunControlError(
            f"run {run_id} is a planning flow, which takes no follow-up; start a session with: python starter.py chat"
        )
    if description.parent_id:
        raise RunControlError(
            f"run {run_id} is a step of flow {description.parent_id}; a flow's step takes no follow-up: send it to "
            "a session of its own (python starter.py chat)"
        )


async def to_open_run(client: Client, run_id: str, text: str) -> Delivery | None:
    """The update to a running session; None when it closed meanwhile."""
    handle = agent_handle(client, run_id)
    try:
        reply = await handle.execute_update(AgentWorkflow.send_message, SessionMessage(text=text))
    except WorkflowUpdateFailedError as e:
        cause = str(getattr(e.cause, "message", None) or e.cause or e)
        if ENDING_HINT in cause:
            await run_control.result_within(handle, 30)
            return None
        raise RunControlError(f"message refused: {cause}") from None
    except RPCError as e:
        if e.status in (RPCStatusCode.NOT_FOUND, RPCStatusCode.FAILED_PRECONDITION) or "completed" in e.message:
            return None  # it closed between the describe and the update
        raise
    view: SessionView | None = await run_control.query(handle, AgentWorkflow.session)
    turn = turn_of_reply(reply, view)
    return Delivery(client, handle, turn, reply)


def turn_of_reply(reply: str, view: SessionView | None) -> int:
    """The turn a message begins, from the run's reply ("turn N ...", "queued: turn N ...")."""
    for word in reply.replace(":", " ").split():
        if word.isdigit():
            return int(word)
    return view.turn if view is not None else 1


async def closed_input(client: Client, run_id: str, execution: str) -> AgentRunInput:
    """The input the closed execution started with (read from its first event only)."""
    response = await client.workflow_service.get_workflow_execution_history(
        GetWorkflowExecutionHistoryRequest(
            namespace=client.namespace,
            execution=ProtoWorkflowExecution(workflow_id=run_id, run_id=execution),
            maximum_page_size=1,
        )
    )
    return await run_control.started_run_input(client, WorkflowHistory(run_id, list(response.history.events)))


async def to_closed_run(
    client: Client, settings: Settings, run_id: str, execution: str, text: str, out: TextIO | None
) -> Delivery | None:
    """A new execution of the same workflow id from the closed one's state,
    with `text` waiting in its inbox; None when another starter reopened it first."""
    closed = client.get_workflow_handle(run_id, run_id=execution, result_type=AgentRunResult)
    original = await closed_input(client, run_id, execution)
    try:
        result = await ended_result(closed, AgentRunResult)
    except WorkflowFailureError as e:
        raise RunControlError(
            f"{await run_control.ended_line(client, run_id, e)}; only a run that ended with a result takes a follow-up"
        ) from None
    carried: RunState = await run_control.query(closed, AgentWorkflow.state_to_carry, out=out)
    outcome = (result.state, result.stop_reason, result.final_answer)
    carried.session = reopened(carried.session, original.task, carried.step, outcome, text)
    terms = original.session or settings.session.terms()
    limits = original.continuation or current_limits()
    workspace = original.workspace or workspace_name_for(run_id)
    # As continue-as-new does, bounded with the message in the inbox.
    continued = continued_input(original, carried, workspace, limits).model_copy(update={"session": terms})
    registered = await run_control.search_attributes_registered(client)
    agent = carried.profile.name if carried.profile else original.agent
    try:
        await client.start_workflow(
            AgentWorkflow.run,
            continued,
            id=run_id,
            task_queue=settings.task_queue,
            task_timeout=limits.workflow_task_timeout(),
            id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
            static_summary=f"session: {summary_of(original.task)}",
            search_attributes=search_attributes.initial(agent) if registered else None,
        )
    except WorkflowAlreadyStartedError:
        return None
    turn = carried.session.turn + 1
    return Delivery(client, agent_handle(client, run_id), turn, f"turn {turn} starts now (the run went on in a new execution)")


TURN_POLL_SECONDS = 0.3


async def turn_within(delivery: Delivery, seconds: float) -> TurnRecord | AgentRunResult | None:
    """How the delivered turn ended, if it did within `seconds` (the run's
    result when the run closed first); None while it works."""
    handle = delivery.handle
    deadline = time.monotonic() + seconds
    while True:
        try:
            view: SessionView | None = await handle.query(AgentWorkflow.session, rpc_timeout=timedelta(seconds=5))
        except RPCError:
            view = None  # no worker yet, or the execution just closed
        record = next((t for t in view.turns if t.turn == delivery.turn), None) if view is not None else None
        if record is not None and record.ended:
            return record
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return None
        ended = await run_control.result_within(handle, min(TURN_POLL_SECONDS, remaining))
        if isinstance(ended, AgentRunResult):
            return next((t for t in ended.turns if t.turn == delivery.turn and t.ended), None) or ended
        if ended is not None:
            raise RunControlError(await run_control.ended_line(delivery.client, handle.id, ended))
