"""`approve`, `reject` and `show` of a gated call, as the user runs them
(starter.py's main in this process, the dev server, an in-process worker)."""

from __future__ import annotations

import json
import uuid

from agent_model.approval import ApprovalMode, ApprovalPolicy
from agent_model.approval_desk import ApprovalAction
from agent_model.profiles import AgentProfile
from agent_model.run import AgentRunInput
from testkit.e2e import wait_until
from testkit.fake_openai import python, terminate
from tests.test_run_control import harness  # noqa: F401 (a fixture)
from workflows.agent import AgentWorkflow

PROFILE = AgentProfile(name="gated", tools=["python_execute", "terminate"], max_steps=4, max_observe=2000)
RISKY_CODE = "import subprocess\nprint('ran', 6 * 7)"


async def start_gated(harness):  # noqa: F811
    handle = await harness.dev_env.client.start_workflow(
        AgentWorkflow.run,
        AgentRunInput(task="t", profile=PROFILE, approval=ApprovalPolicy(mode=ApprovalMode.RISKY)),
        id=f"gate-{uuid.uuid4().hex[:8]}",
        task_queue=harness.settings.task_queue,
    )
    await wait_until(lambda: handle.query(AgentWorkflow.pending_approval), 30, "the gated call", 0.1)
    return handle


async def test_show_then_approve_from_the_command_line(harness, fake_llm):  # noqa: F811
    fake_llm.turns = [python(RISKY_CODE), terminate("done")]
    handle = await start_gated(harness)

    out = await harness.cli("show", handle.id)
    assert f"call 1.1 of {handle.id} waits for approval" in out and "python_execute(" in out and "subprocess" in out
    assert "not the one waiting (call 1.1)" in await harness.cli("approve", handle.id, "2.1", expect=2)
    assert "is not a call id" in await harness.cli("approve", handle.id, "first", expect=2)
    assert "not valid JSON" in await harness.cli("approve", handle.id, "--edit", "{x", expect=2)

    out = await harness.cli("approve", handle.id)
    assert f"approved call 1.1 of {handle.id}: python_execute" in out
    result = await handle.result()
    decided = result.steps[0].tool_calls[0].approval
    assert decided.action == ApprovalAction.APPROVE and decided.decided_by.endswith("(cli)")
    assert result.steps[0].tool_calls[0].observation.strip() == "ran 42"
    assert "has ended" in await harness.cli("approve", handle.id, expect=2)


async def test_reject_with_a_reason_and_edit_from_the_command_line(harness, fake_llm):  # noqa: F811
    fake_llm.turns = [python(RISKY_CODE), python(RISKY_CODE), terminate("done")]
    handle = await start_gated(harness)
    out = await harness.cli("reject", handle.id, "1.1", "not on my machine")
    assert f"rejected call 1.1 of {handle.id}" in out

    await wait_until(lambda: handle.query(AgentWorkflow.pending_approval), 30, "the second gated call", 0.1)
    edited = json.dumps({"code": "print('edited')"})
    out = await harness.cli("approve", handle.id, "--edit", edited)
    assert f"approved with new arguments call 2.1 of {handle.id}" in out
    result = await handle.result()

    first, second = (record.tool_calls[0] for record in result.steps[:2])
    assert first.observation == "The user rejected this call: not on my machine"
    assert second.observation.strip() == "edited" and second.approval.arguments == edited


async def test_deciding_without_a_gated_call_is_one_line(harness, fake_llm):  # noqa: F811
    fake_llm.turns = [python("import time; time.sleep(30)"), terminate("x")]
    handle = await harness.dev_env.client.start_workflow(
        AgentWorkflow.run,
        AgentRunInput(task="t", profile=PROFILE, approval=ApprovalPolicy(mode=ApprovalMode.RISKY)),
        id=f"gate-{uuid.uuid4().hex[:8]}",
        task_queue=harness.settings.task_queue,
    )
    await wait_until(lambda: len(fake_llm.requests) >= 1, 30, "the first think")
    assert "has no call waiting for approval" in await harness.cli("reject", handle.id, "why not", expect=2)
    await harness.cli("cancel", handle.id)
