"""Deciding a run's gated tool call from outside: approve, reject or edit it
(the `decide` update), for the CLI, the terminal prompt and the MCP server."""

from __future__ import annotations

import getpass
import socket
from typing import TextIO

from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError

from agent_model.approval_desk import ApprovalAction, ApprovalDecision, PendingApproval
from runtime.run_control import query, working_run
from runtime.terminal_text import inert
from runtime.user_errors import RunControlError
from workflows.agent import AgentWorkflow


def who_decides(channel: str) -> str:
    """The decided_by text for this process: user@host (channel)."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container)
        user = "unknown"
    return f"{user}@{socket.gethostname()} ({channel})"


def pending_line(run_id: str, waiting: PendingApproval) -> str:
    return (
        f"call {waiting.id} of {run_id} waits for approval ({waiting.reason}): "
        f"{waiting.tool}({waiting.arguments})"
    )


async def approval_target(client: Client, run_id: str, out: TextIO | None = None) -> tuple[WorkflowHandle, PendingApproval | None]:
    """The agent run (a flow's working step, for a flow) and its gated call, if one waits."""
    run_id = await working_run(client, run_id, "call", out)
    handle = client.get_workflow_handle_for(AgentWorkflow.run, run_id)
    return handle, await query(handle, AgentWorkflow.pending_approval, out=out)


async def send_decision(handle: WorkflowHandle, decision: ApprovalDecision) -> str:
    try:
        return await handle.execute_update(AgentWorkflow.decide, decision)
    except WorkflowUpdateFailedError as e:
        raise RunControlError(f"decision refused: {e.cause}") from None


async def deliver_decision(
    client: Client,
    run_id: str,
    call_id: str | None,
    action: ApprovalAction,
    *,
    reason: str = "",
    arguments: str | None = None,
    decided_by: str,
    out: TextIO | None = None,
) -> tuple[str, PendingApproval]:
    """Decide the gated call `call_id` (default: the one waiting) of the run or
    its flow's working step; the id of the run that took it, and the call."""
    handle, waiting = await approval_target(client, run_id, out)
    if waiting is None:
        raise RunControlError(f"run {handle.id} has no call waiting for approval")
    decision = ApprovalDecision(
        call_id=call_id or waiting.id, action=action, reason=reason, arguments=arguments, decided_by=decided_by
    )
    await send_decision(handle, decision)  # a call id that is not the waiting one is refused by the run
    return handle.id, waiting


async def decide(
    client: Client, run_id: str, call_id: str | None, action: ApprovalAction, reason: str,
    arguments: str | None, out: TextIO,
) -> None:
    decided, waiting = await deliver_decision(
        client, run_id, call_id, action, reason=reason, arguments=arguments, decided_by=who_decides("cli"), out=out
    )
    past = {"approve": "approved", "reject": "rejected", "edit": "approved with new arguments"}[action.value]
    print(inert(f"{past} call {waiting.id} of {decided}: {waiting.tool}"), file=out)


async def show_pending(client: Client, run_id: str, out: TextIO) -> None:
    """After a transcript: the gated call that waits, with its arguments."""
    try:
        handle, waiting = await approval_target(client, run_id)
    except RunControlError:
        return
    if waiting is not None:
        print(inert(f"\n{pending_line(handle.id, waiting)}"), file=out)
        print(f"decide with: python starter.py approve {run_id} {waiting.id} | reject {run_id} {waiting.id} \"why\"", file=out)
