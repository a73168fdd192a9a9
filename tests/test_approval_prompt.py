"""The terminal's y / n / e prompt for a gated call (runtime/approval_prompt.py),
typed into while a real AgentWorkflow waits at its gate (time-skipping server,
real activities, the fake LLM over HTTP). The prompt reads lines through its
`read_line` parameter, which the follower (runtime/follow.py) fills with the
terminal's; here it is fed the lines a person would type."""

from __future__ import annotations

import io
import json
from typing import TextIO

from agent_model.approval_desk import ApprovalAction
from agent_model.run import AgentRunResult
from runtime.approval_prompt import ask_approval
from testkit.fake_openai import python, terminate
from tests.test_approval_workflow import RISKY_CODE, pending, start, tool_replies


def typed(*lines: str):
    """A read_line that answers the prompt's questions with `lines`, then end of input."""
    left = list(lines)

    async def read_line(_stdin: TextIO) -> str:
        return f"{left.pop(0)}\n" if left else ""

    return read_line, left


async def prompt(handle, *lines: str) -> tuple[str, list[str]]:
    """What the prompt printed for the waiting call, and the lines it did not read."""
    waiting = await pending(handle)
    out = io.StringIO()
    read_line, left = typed(*lines)
    await ask_approval(handle, waiting, out, read_line)
    return out.getvalue(), left


async def test_y_approves_and_the_call_runs(time_skipping_env, worker, settings, fake_llm):
    fake_llm.turns = [python(RISKY_CODE), terminate("done")]
    handle = await start(time_skipping_env, settings)
    shown, left = await prompt(handle, "y")
    result: AgentRunResult = await handle.result()

    assert "? The agent wants to run python_execute(" in shown and "subprocess" in shown
    assert "approve? [y]es, [n]o, [e]dit > " in shown and left == []
    (record,) = result.steps[0].tool_calls
    assert record.observation.strip() == "ran 42"
    assert record.approval is not None and record.approval.action == ApprovalAction.APPROVE
    assert record.approval.decided_by.endswith("(terminal)"), record.approval.decided_by


async def test_n_with_a_reason_rejects_and_the_model_is_told(time_skipping_env, worker, settings, fake_llm):
    fake_llm.turns = [python(RISKY_CODE), terminate("understood")]
    handle = await start(time_skipping_env, settings)
    shown, _ = await prompt(handle, "no", "not on this machine")
    result: AgentRunResult = await handle.result()

    assert "why (the agent is told)? > " in shown
    (record,) = result.steps[0].tool_calls
    assert record.approval is not None and record.approval.action == ApprovalAction.REJECT
    assert record.approval.reason == "not on this machine"
    assert tool_replies(fake_llm.requests[1]) == ["The user rejected this call: not on this machine"]


async def test_e_with_json_runs_the_edited_call(time_skipping_env, worker, settings, fake_llm):
    fake_llm.turns = [python(RISKY_CODE), terminate("edited")]
    handle = await start(time_skipping_env, settings)
    shown, _ = await prompt(handle, "e", json.dumps({"code": "print('safe', 1 + 1)"}))
    result: AgentRunResult = await handle.result()

    assert "the arguments to run it with (one line of JSON) > " in shown
    (record,) = result.steps[0].tool_calls
    assert record.approval is not None and record.approval.action == ApprovalAction.EDIT
    assert record.observation.strip() == "safe 2"


async def test_bad_input_asks_again(time_skipping_env, worker, settings, fake_llm):
    fake_llm.turns = [python(RISKY_CODE), terminate("done")]
    handle = await start(time_skipping_env, settings)
    # Not a choice, then an empty edit, then an edit that is not JSON (refused by
    # the run, typed again), then a good one.
    shown, left = await prompt(handle, "maybe", "", "e", "", "e", "{not json", "e", json.dumps({"code": "print(3)"}))
    result: AgentRunResult = await handle.result()

    assert shown.count("approve? [y]es, [n]o, [e]dit > ") == 5, shown
    assert shown.count("decision not accepted: ") == 1, shown
    assert left == []
    assert result.steps[0].tool_calls[0].observation.strip() == "3"


async def test_end_of_input_leaves_the_call_waiting_and_says_how_to_decide(time_skipping_env, worker, settings, fake_llm):
    fake_llm.turns = [python(RISKY_CODE), terminate("done")]
    handle = await start(time_skipping_env, settings)
    shown, _ = await prompt(handle)

    assert f"(no more input; decide later with: python starter.py approve {handle.id} 1.1" in shown
    assert (await pending(handle)).id == "1.1"  # still waiting
    await handle.terminate("test over")
