"""The run's gated call waiting for a decision, and who gets to close it.

A reply's gated calls are decided one at a time, in reply order: the call at
hand is pending, the next one is only opened once the one before has run.
So a decision always names the call it was made for (its id, `<step>.<n>`)
and can only reach that call; a decision for any other id is refused. One at
a time, not all at once, because a later call's gate and its meaning depend
on what the earlier ones did (the page a click lands on, a file just
written): the person decides each knowing the outcome of the one before.

As with ask_human (agent_model/human.py), a decision and the wait's timeout
can reach the workflow in the same activation; whichever is handled first
closes the call and the other finds it closed, so the sender and the model
always hear the same outcome.
"""

from __future__ import annotations

from datetime import datetime
from enum import Enum

from pydantic import BaseModel, Field

from agent_model.desk import not_the_waiting_one, remember_closed
from agent_model.tool_arguments import read_arguments

DECIDED_BY_CHARS = 200
"""Characters of who decided, as the sender names itself."""
REASON_CHARS = 2_000
"""Characters of a rejection's reason (the model reads it)."""
SHOWN_ARGUMENTS_CHARS = 4_000
"""Characters of a pending call's arguments that queries and the Web UI show."""


class ApprovalAction(str, Enum):
    APPROVE = "approve"
    REJECT = "reject"
    EDIT = "edit"
    """Approve with changed arguments."""


class PendingApproval(BaseModel):
    id: str
    """`<step>.<n>`: the call's step and its place in the reply, from 1."""
    tool: str
    arguments: str
    """The call's arguments as the model wrote them (cut to SHOWN_ARGUMENTS_CHARS)."""
    reason: str
    """Why it is gated (the rule)."""
    since: datetime
    timeout_seconds: float


class ApprovalDecision(BaseModel):
    """The `decide` update's input."""

    call_id: str
    action: ApprovalAction
    reason: str = ""
    """reject: why; the model gets it as the call's observation."""
    arguments: str | None = None
    """edit: the arguments to run the call with, a JSON object."""
    decided_by: str = ""
    """Who decides, as the sender names itself (the CLI: user@host)."""


class ApprovalRecord(BaseModel):
    """A gated call's decision, kept in its ToolCallRecord: the audit trail."""

    call_id: str
    gated_by: str
    action: ApprovalAction
    decided_by: str
    """The sender's name, or "timeout" when nobody decided in time."""
    at: datetime
    reason: str = ""
    arguments: str | None = None
    """edit: the arguments the call ran with."""


class ApprovalClosed(Exception):
    """A decision that cannot be taken; the message says why."""


def cleaned(text: str, limit: int) -> str:
    """One bounded line of a person's text: control characters become spaces."""
    return " ".join("".join(c if c.isprintable() else " " for c in text).split())[:limit]


class ApprovalDesk(BaseModel):
    """Part of the run's state (continue-as-new carries it whole)."""

    pending: PendingApproval | None = None
    decision: ApprovalRecord | None = None
    """The decision on the latest call, once taken."""
    closed: dict[str, str] = Field(default_factory=dict)
    """Why each earlier call closed, by call id."""

    def open(self, call: PendingApproval) -> None:
        self.pending, self.decision = call, None

    def refusal(self, decision: ApprovalDecision) -> str | None:
        """Why `decision` cannot be taken now, or None if it can."""
        waiting = self.pending.id if self.pending else None
        refusal = not_the_waiting_one("call", decision.call_id, waiting, self.closed, "no call is waiting for approval")
        if refusal is not None:
            return refusal
        if len(decision.decided_by) > DECIDED_BY_CHARS * 4 or len(decision.reason) > REASON_CHARS * 4:
            return "the decision's text is too long"
        if decision.action == ApprovalAction.EDIT:
            if decision.arguments is None:
                return "an edit needs the new arguments (a JSON object)"
            _, problem = read_arguments(decision.arguments)
            if problem is not None:
                return f"the edited arguments are {problem}"
        elif decision.arguments is not None:
            return "arguments go with an edit only"
        return None

    def accept(self, decision: ApprovalDecision, gated_by: str, now: datetime) -> str:
        """Take the decision and close the call; the confirmation for the
        sender. Raises ApprovalClosed when it cannot be taken."""
        refusal = self.refusal(decision)
        if refusal is not None:
            raise ApprovalClosed(refusal)
        self.decision = ApprovalRecord(
            call_id=decision.call_id,
            gated_by=gated_by,
            action=decision.action,
            decided_by=cleaned(decision.decided_by, DECIDED_BY_CHARS) or "someone",
            at=now,
            reason=cleaned(decision.reason, REASON_CHARS),
            arguments=decision.arguments,
        )
        self._close(f"it was decided ({decision.action.value})")
        return f"call {decision.call_id}: {decision.action.value} received"

    def close(self, why: str) -> ApprovalRecord | None:
        """Close the waiting call (timed out, the run cancelled); returns the
        decision taken before, if one was: it stands."""
        if self.pending is not None:
            self._close(why)
        return self.decision

    def _close(self, why: str) -> None:
        assert self.pending is not None
        remember_closed(self.closed, self.pending.id, why)
        self.pending = None
