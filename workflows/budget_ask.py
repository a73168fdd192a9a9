"""At a budget's ceiling, the run's question to the user whether to raise it.

The same durable wait as ask_human (workflows/agent_tools.py ask_user): the
question goes on the run's question desk, so the `answer` update, the CLI's
terminal prompt and `answer` command and the MCP server's answer tool all
reach it. The reply is read by agent_model/budget_raise.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from agent_model.budget import Budget
    from agent_model.budget_raise import BUDGET_QUESTIONS, ceiling_question, read_reply
    from agent_model.human import HumanQuestion
    from agent_model.prompting import fill
    from agent_model.run_state import RunState
    from prompts import agent_notes

NO_REPLY = "no reply came within {seconds} seconds"
STOPPED = "the user chose to stop"
NOT_RAISED = "no reply in {questions} questions gave a higher ceiling"


async def ask_to_raise(
    state: RunState, budget: Budget, cost: float | None, seconds: float, publish: Callable[[], None]
) -> Budget | str:
    """Ask until a reply raises the ceiling (the raised budget is returned) or
    the run is to end (why, for its note). A cancellation of the run escapes."""
    desk, problem = state.desk, None
    shown = f"{seconds:g}"
    for attempt in range(1, BUDGET_QUESTIONS + 1):
        question_id = f"{state.step}.budget" + ("" if attempt == 1 else f".{attempt}")
        desk.ask(HumanQuestion(id=question_id, text=ceiling_question(budget, state.usage, cost, problem)))
        publish()
        try:
            await workflow.wait_condition(
                lambda: desk.answer is not None,
                timeout=timedelta(seconds=seconds),
                timeout_summary="waiting for the user's reply at the budget's ceiling",
            )
        except asyncio.TimeoutError:
            # A reply accepted in this same activation was confirmed to its sender: it stands.
            if desk.close(fill(agent_notes.HUMAN_TIMEOUT_REASON, seconds=shown)) is None:
                return fill(NO_REPLY, seconds=shown)
        except asyncio.CancelledError:
            desk.close(agent_notes.CANCELLED_NOTE)
            raise
        assert desk.answer is not None
        reply = read_reply(desk.answer, budget, state.usage, cost)
        if reply.raised is not None:
            return reply.raised
        if reply.problem is None:
            return STOPPED
        problem = reply.problem
    return fill(NOT_RAISED, questions=BUDGET_QUESTIONS)
