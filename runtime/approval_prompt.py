"""The terminal prompt for a gated call while a run is followed: y / n / e."""

from __future__ import annotations

import sys
from typing import Awaitable, Callable, TextIO

from temporalio.client import WorkflowHandle, WorkflowUpdateFailedError
from temporalio.service import RPCError

from agent_model.approval_desk import ApprovalAction, ApprovalDecision, PendingApproval
from runtime.approvals import who_decides
from runtime.terminal_text import inert

ReadLine = Callable[[TextIO], Awaitable[str]]


async def ask_approval(handle: WorkflowHandle, waiting: PendingApproval, out: TextIO, read_line: ReadLine) -> None:
    """Ask until the person decides the call (or input ends), then send the decision."""
    print(f"\n? The agent wants to run {inert(waiting.tool)}({inert(waiting.arguments)})", file=out)
    print(f"  gated: {inert(waiting.reason)}", file=out)
    later = f"python starter.py approve {handle.id} {waiting.id}  |  reject {handle.id} {waiting.id} \"why\""
    while True:
        answer = await _ask("approve? [y]es, [n]o, [e]dit > ", out, read_line)
        if answer is None:
            print(f"(no more input; decide later with: {later})", file=out, flush=True)
            return
        choice = answer.strip().lower()[:1]
        if choice == "y":
            decision = ApprovalDecision(call_id=waiting.id, action=ApprovalAction.APPROVE)
        elif choice == "n":
            reason = await _ask("why (the agent is told)? > ", out, read_line)
            decision = ApprovalDecision(call_id=waiting.id, action=ApprovalAction.REJECT, reason=(reason or "").strip())
        elif choice == "e":
            edited = await _ask("the arguments to run it with (one line of JSON) > ", out, read_line)
            if not edited or not edited.strip():
                continue
            decision = ApprovalDecision(call_id=waiting.id, action=ApprovalAction.EDIT, arguments=edited.strip())
        else:
            continue
        decision.decided_by = who_decides("terminal")
        try:
            await handle.execute_update("decide", decision)
            return
        except (WorkflowUpdateFailedError, RPCError) as e:
            print(f"decision not accepted: {inert(getattr(e, 'cause', None) or e)}", file=out)
            if choice != "e":
                return  # closed or not waiting: asking again cannot help; a bad edit can be typed again


async def _ask(prompt: str, out: TextIO, read_line: ReadLine) -> str | None:
    print(prompt, end="", file=out, flush=True)
    line = await read_line(sys.stdin)
    return line if line else None
