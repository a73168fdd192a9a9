"""What the page's forms do, each through the CLI's own code path: start
(runtime/run_start.py, with the checks `run` makes), answer
(run_control.deliver_answer), approve or reject (approvals.deliver_decision),
follow up (follow_up.deliver), cancel (run_control.cancel) and fork
(fork.start_fork). Each ends in one line for the page: what was done, or why not."""

from __future__ import annotations

import io
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from temporalio.client import Client

from agent_model.approval import ApprovalMode
from agent_model.approval_desk import REASON_CHARS, ApprovalAction
from agent_model.flow import DEFAULT_FLOW_TIMEOUT_SECONDS
from agent_model.profiles import get_profile
from agent_model.session import MESSAGE_LIMIT
from config.settings import Settings
from runtime import fork, follow_up, run_control
from runtime.approvals import deliver_decision, who_decides
from runtime.failure_line import failure_line as shared_failure_line
from runtime.command_line import CALL_ID
from runtime.run_page.html_text import run_url
from runtime.run_page.pages import FLOW_CHOICE
from runtime.run_start import check_task_fits, flow_llms, run_budget, run_llms, start_agent_run, start_planning_flow
from runtime.user_errors import UsageError


TASK_LIMIT = 100_000
"""Characters of a task (as the MCP server's start_run)."""
ANSWER_LIMIT = 100_000
MAX_STEPS_LIMIT = 10_000
MAX_FLOW_AGENTS = 8
CANCEL_WAIT_SECONDS = 10.0
"""How long a cancel waits for the run to end before saying it has not yet."""
DECIDER = "run page"


@dataclass(frozen=True)
class Done:
    ok: bool
    line: str
    location: str | None = None
    """Where the browser goes next (a new run's page); None: it stays."""


EnsureWorker = Callable[[str], Awaitable[None]]
"""The CLI's start_unless_answered: a worker for the run, unless one answers for it."""


def failure_line(error: Exception) -> str:
    return shared_failure_line(error, "a run page action")


def text_field(fields: dict[str, str], name: str, what: str, limit: int, required: bool = True) -> str:
    value = fields.get(name, "")
    if required and not value.strip():
        raise UsageError(f"{what} is empty")
    if len(value) > limit:
        raise UsageError(f"{what} has {len(value)} characters, over the limit of {limit}")
    return value


def number_field(fields: dict[str, str], name: str, what: str, low: int, high: int) -> int | None:
    value = fields.get(name, "").strip()
    if not value:
        return None
    if not value.isdigit() or not low <= int(value) <= high:
        raise UsageError(f"{what} must be a whole number from {low} to {high}")
    return int(value)


class Actions:
    def __init__(self, client: Client, settings: Settings, ensure_worker: EnsureWorker) -> None:
        self.client, self.settings, self.ensure_worker = client, settings, ensure_worker

    async def run(self, name: str, run_id: str | None, fields: dict[str, str]) -> Done:
        """Carry out the action `name` ("start", "answer", ...); every failure is one line."""
        try:
            if name == "start":
                return await self.start(fields)
            assert run_id is not None
            method = {
                "answer": self.answer, "decide": self.decide, "message": self.message, "cancel": self.cancel,
                "fork": self.fork,
            }[name]
            return await method(run_id, fields)
        except Exception as e:  # noqa: BLE001 - a refused or failed action is a line on the page
            return Done(False, failure_line(e))

    async def start(self, fields: dict[str, str]) -> Done:
        task = text_field(fields, "task", "the task", TASK_LIMIT)
        kind = fields.get("kind", "agent:manus")
        mode = fields.get("approve", "")
        if mode not in ("", *(m.value for m in ApprovalMode)):
            raise UsageError(f"approval must be none, risky or all, not {mode!r}")
        approve = ApprovalMode(mode) if mode else None
        max_steps = number_field(fields, "max_steps", "max steps", 1, MAX_STEPS_LIMIT)
        settings = self.settings
        if kind == FLOW_CHOICE:
            agents = tuple(dict.fromkeys(a.strip() for a in fields.get("agents", "manus").split(",") if a.strip()))
            if not agents or len(agents) > MAX_FLOW_AGENTS:
                raise UsageError(f"a flow needs from 1 to {MAX_FLOW_AGENTS} agents, comma-separated")
            for agent in agents:
                get_profile(agent)
            check_task_fits(settings, task, agents)
            run_budget(settings, flow_llms(agents, None))
            handle = await start_planning_flow(
                self.client, settings, task, agents=agents, timeout=DEFAULT_FLOW_TIMEOUT_SECONDS, max_steps=max_steps,
                steps_per_run=None, run_id=None, approve=approve,
            )
            what = f"planning flow ({', '.join(agents)})"
        else:
            agent = kind.removeprefix("agent:")
            if not kind.startswith("agent:"):
                raise UsageError(f"{kind!r} is neither an agent nor the planning flow")
            get_profile(agent)
            check_task_fits(settings, task, (agent,))
            run_budget(settings, run_llms(agent, None))
            handle = await start_agent_run(
                self.client, settings, task, agent=agent, max_steps=max_steps, steps_per_run=None, run_id=None,
                approve=approve,
            )
            what = f"agent {agent}; {settings.approval.policy_for(agent, approve).summary()}"
        await self.ensure_worker(handle.id)
        return Done(True, f"started run {handle.id} ({what})", run_url(handle.id))

    async def answer(self, run_id: str, fields: dict[str, str]) -> Done:
        text = text_field(fields, "text", "the answer", ANSWER_LIMIT)
        await self.ensure_worker(run_id)
        answered, question = await run_control.deliver_answer(self.client, run_id, text)
        return Done(True, f"answered question {question.id} of {answered}: {question.text}")

    async def decide(self, run_id: str, fields: dict[str, str]) -> Done:
        action = fields.get("decision", "")
        if action not in (ApprovalAction.APPROVE.value, ApprovalAction.REJECT.value):
            raise UsageError("the decision must be approve or reject")
        call = fields.get("call", "").strip() or None
        if call is not None and not CALL_ID.fullmatch(call):
            raise UsageError(f"{call!r} is not a call id (<step>.<n>, e.g. 3.1)")
        reason = text_field(fields, "reason", "the reason", REASON_CHARS, required=False)
        await self.ensure_worker(run_id)
        decided, waiting = await deliver_decision(
            self.client, run_id, call, ApprovalAction(action), reason=reason, decided_by=who_decides(DECIDER)
        )
        past = "approved" if action == "approve" else "rejected"
        return Done(True, f"{past} call {waiting.id} of {decided}: {waiting.tool}")

    async def message(self, run_id: str, fields: dict[str, str]) -> Done:
        text = text_field(fields, "text", "the message", MESSAGE_LIMIT)
        await self.ensure_worker(run_id)
        delivery = await follow_up.deliver(self.client, self.settings, run_id, text)
        # The page reloads: a closed run that took it goes on in a new execution, to be followed anew.
        return Done(True, f"run {run_id}: {delivery.reply}", run_url(run_id))

    async def cancel(self, run_id: str, fields: dict[str, str]) -> Done:
        await self.ensure_worker(run_id)
        report = io.StringIO()
        ended = await run_control.cancel(self.client, run_id, report, wait_seconds=CANCEL_WAIT_SECONDS)
        lines = [line for line in report.getvalue().splitlines() if line.strip()]
        return Done(ended, lines[-1] if lines else f"cancellation of {run_id} requested")

    async def fork(self, run_id: str, fields: dict[str, str]) -> Done:
        step = number_field(fields, "step", "the step", 0, 10**9)
        if step is None:
            raise UsageError("give the step to fork from (0: the start)")
        message = text_field(fields, "message", "the message", MESSAGE_LIMIT, required=False).strip() or None
        await self.ensure_worker(run_id)  # the origin's state is read by replaying it here; its files by a worker
        handle = await fork.start_fork(self.client, self.settings, run_id, step, message=message)
        await self.ensure_worker(handle.id)
        return Done(True, f"forked {run_id} at step {step}: new run {handle.id}", run_url(handle.id))
