"""Approval gates in a real AgentWorkflow (time-skipping server, real activities,
the fake LLM over HTTP): a gated call waits before its activity for the
`decide` update; approve, reject, edit and a timeout each reach the model."""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest
from temporalio.client import WorkflowHandle, WorkflowUpdateFailedError
from temporalio.service import RPCError

from agent_model.approval import ApprovalMode, ApprovalPolicy, TimeoutAction
from agent_model.approval_desk import ApprovalAction, ApprovalDecision, PendingApproval
from agent_model.profiles import AgentProfile
from agent_model.run import AgentRunInput, AgentRunResult
from testkit.fake_openai import Reply, call, python, terminate
from workflows.agent import AgentWorkflow

PROFILE = AgentProfile(
    name="gated",
    system_prompt="You are a test agent in {directory}.",
    tools=["python_execute", "ask_human", "terminate"],
    max_steps=5,
    max_observe=2000,
)
RISKY = ApprovalPolicy(mode=ApprovalMode.RISKY, timeout_seconds=600)
RISKY_CODE = "import subprocess\nprint('ran', 6 * 7)"
"""Gated by the built-in set (subprocess); harmless when it runs."""


async def start(env, settings, policy: ApprovalPolicy | None = RISKY) -> WorkflowHandle:
    return await env.client.start_workflow(
        AgentWorkflow.run,
        AgentRunInput(task="do it", profile=PROFILE, approval=policy),
        id=f"gated-{uuid.uuid4().hex[:8]}",
        task_queue=settings.task_queue,
        result_type=AgentRunResult,
    )


async def pending(handle: WorkflowHandle, call_id: str | None = None) -> PendingApproval:
    """The gated call that waits (the one with `call_id`, when given)."""
    for _ in range(600):
        try:
            waiting = await handle.query(AgentWorkflow.pending_approval)
        except RPCError:  # not started yet (a flow's step)
            waiting = None
        if waiting is not None and (call_id is None or waiting.id == call_id):
            return waiting
        await asyncio.sleep(0.05)
    raise AssertionError(f"no call {call_id or ''} waited for approval")


async def refusal(handle: WorkflowHandle, decision: ApprovalDecision) -> str:
    """Why the run refused the decision (its validator's message)."""
    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await handle.execute_update(AgentWorkflow.decide, decision)
    return str(refused.value.cause)


def tool_replies(request) -> list[str]:
    return [m["content"] for m in request.messages if m["role"] == "tool"]


def decide(call_id: str, action: ApprovalAction, **kw) -> ApprovalDecision:
    return ApprovalDecision(call_id=call_id, action=action, decided_by="tester@host", **kw)


async def test_an_approved_call_runs_and_its_decision_is_recorded(time_skipping_env, worker, settings, fake_llm):
    fake_llm.turns = [python(RISKY_CODE), terminate("done")]
    handle = await start(time_skipping_env, settings)
    waiting = await pending(handle)
    assert (waiting.id, waiting.tool) == ("1.1", "python_execute")
    assert "subprocess" in waiting.arguments and "Python code" in waiting.reason
    status = await handle.query(AgentWorkflow.status)
    assert status.pending_approval == waiting
    assert len(fake_llm.requests) == 1  # nothing ran and nothing was asked while it waits

    confirmation = await handle.execute_update(AgentWorkflow.decide, decide("1.1", ApprovalAction.APPROVE))
    assert confirmation == "call 1.1: approve received"
    result = await handle.result()

    assert tool_replies(fake_llm.requests[1])[0].strip() == "ran 42"
    record = result.steps[0].tool_calls[0]
    assert record.approval is not None
    assert (record.approval.action, record.approval.decided_by) == (ApprovalAction.APPROVE, "tester@host")
    assert record.approval.call_id == "1.1" and record.approval.gated_by == waiting.reason
    assert await handle.query(AgentWorkflow.pending_approval) is None


async def test_a_rejected_call_never_runs_and_the_model_gets_the_reason(
    time_skipping_env, worker, settings, fake_llm, tmp_path
):
    marker = tmp_path / "ran"
    fake_llm.turns = [python(f"import subprocess\nopen({str(marker)!r}, 'w').write('x')"), terminate("ok")]
    handle = await start(time_skipping_env, settings)
    await pending(handle, "1.1")
    await handle.execute_update(
        AgentWorkflow.decide, decide("1.1", ApprovalAction.REJECT, reason="no subprocesses today")
    )
    result = await handle.result()

    assert tool_replies(fake_llm.requests[1]) == ["The user rejected this call: no subprocesses today"]
    assert not marker.exists()
    record = result.steps[0].tool_calls[0]
    assert record.error and record.approval is not None
    assert (record.approval.action, record.approval.reason) == (ApprovalAction.REJECT, "no subprocesses today")


async def test_an_edited_call_runs_with_the_edited_arguments(time_skipping_env, worker, settings, fake_llm):
    fake_llm.turns = [python(RISKY_CODE), terminate("done")]
    handle = await start(time_skipping_env, settings)
    await pending(handle, "1.1")
    assert "not valid JSON" in await refusal(handle, decide("1.1", ApprovalAction.EDIT, arguments="{nope"))
    edited = json.dumps({"code": "print('edited', 2 + 3)"})
    await handle.execute_update(AgentWorkflow.decide, decide("1.1", ApprovalAction.EDIT, arguments=edited))
    result = await handle.result()

    second = fake_llm.requests[1]
    assert tool_replies(second)[0].strip() == "edited 5"
    notes = [m["content"] for m in second.messages if m["role"] == "user"]
    assert any("changed the arguments of call 1.1" in n and "edited" in n for n in notes)
    assert result.steps[0].tool_calls[0].approval.arguments == edited


async def test_nobody_deciding_takes_the_policy_default(time_skipping_env, worker, settings, fake_llm):
    fake_llm.turns = [python(RISKY_CODE), terminate("done")]
    policy = RISKY.model_copy(update={"timeout_seconds": 90})
    handle = await start(time_skipping_env, settings, policy)
    result = await handle.result()  # the time-skipping server jumps the 90 s
    assert tool_replies(fake_llm.requests[1]) == [
        "Not run: this call needed the user's approval and no decision came within 90 seconds."
    ]
    decided = result.steps[0].tool_calls[0].approval
    assert (decided.action, decided.decided_by) == (ApprovalAction.REJECT, "timeout")


async def test_a_timeout_can_approve_by_default(time_skipping_env, worker, settings, fake_llm):
    fake_llm.turns = [python(RISKY_CODE), terminate("done")]
    policy = RISKY.model_copy(update={"timeout_seconds": 90, "on_timeout": TimeoutAction.APPROVE})
    result = await (await start(time_skipping_env, settings, policy)).result()
    assert tool_replies(fake_llm.requests[1])[0].strip() == "ran 42"
    assert result.steps[0].tool_calls[0].approval.action == ApprovalAction.APPROVE


async def test_two_gated_calls_of_one_reply_are_each_decided_on_their_own(
    time_skipping_env, worker, settings, fake_llm
):
    first = "import subprocess\nprint('first ran')"
    second = "import subprocess\nprint('second ran')"
    fake_llm.turns = [
        Reply(tool_calls=[call("python_execute", {"code": first}), call("python_execute", {"code": second})]),
        terminate("done"),
    ]
    handle = await start(time_skipping_env, settings)
    waiting = await pending(handle, "1.1")
    assert "first ran" in waiting.arguments
    assert "not the one waiting" in await refusal(handle, decide("1.2", ApprovalAction.REJECT, reason="no"))
    await handle.execute_update(AgentWorkflow.decide, decide("1.1", ApprovalAction.REJECT, reason="not the first"))
    waiting = await pending(handle, "1.2")
    assert "second ran" in waiting.arguments
    assert "call 1.1 is closed" in await refusal(handle, decide("1.1", ApprovalAction.APPROVE))
    await handle.execute_update(AgentWorkflow.decide, decide("1.2", ApprovalAction.APPROVE))
    result = await handle.result()

    replies = tool_replies(fake_llm.requests[1])
    assert replies[0] == "The user rejected this call: not the first"
    assert replies[1].strip() == "second ran"
    first_record, second_record = result.steps[0].tool_calls
    assert (first_record.approval.call_id, first_record.approval.action) == ("1.1", ApprovalAction.REJECT)
    assert (second_record.approval.call_id, second_record.approval.action) == ("1.2", ApprovalAction.APPROVE)


async def test_a_call_the_policy_does_not_gate_runs_without_waiting(time_skipping_env, worker, settings, fake_llm):
    fake_llm.turns = [python("print(6 * 7)"), terminate("done")]
    result = await (await start(time_skipping_env, settings)).result()
    assert tool_replies(fake_llm.requests[1])[0].strip() == "42"
    assert result.steps[0].tool_calls[0].approval is None


async def test_mode_all_gates_tools_but_not_the_run_ending_one(time_skipping_env, worker, settings, fake_llm):
    fake_llm.turns = [python("print(1)"), terminate("done")]
    handle = await start(time_skipping_env, settings, ApprovalPolicy(mode=ApprovalMode.ALL))
    await pending(handle, "1.1")
    await handle.execute_update(AgentWorkflow.decide, decide("1.1", ApprovalAction.APPROVE))
    result = await handle.result()  # terminate did not wait
    assert result.succeeded and result.final_answer == "done"


async def test_unknown_ids_and_decisions_without_a_waiting_call_are_refused(
    time_skipping_env, worker, settings, fake_llm
):
    fake_llm.turns = [python(RISKY_CODE), terminate("done")]
    handle = await start(time_skipping_env, settings)
    await pending(handle, "1.1")
    assert "not the one waiting" in await refusal(handle, decide("7.3", ApprovalAction.APPROVE))
    assert "edit only" in await refusal(handle, decide("1.1", ApprovalAction.APPROVE, arguments="{}"))
    await handle.execute_update(AgentWorkflow.decide, decide("1.1", ApprovalAction.APPROVE))
    await handle.result()


async def test_a_flow_step_gets_its_executor_policy_and_is_decided_through_the_flow(
    time_skipping_env, worker, settings, fake_llm
):
    from agent_model.flow import PlanningFlowInput
    from runtime.approvals import deliver_decision
    from tests.test_planning_flow import FlowScript, plan_reply
    from workflows.planning import PlanningFlowWorkflow

    script = FlowScript(plan_reply("[manus] Do it"), {1: [python(RISKY_CODE), terminate("step done")]})
    fake_llm.responder = script
    flow = await time_skipping_env.client.start_workflow(
        PlanningFlowWorkflow.run,
        PlanningFlowInput(task="t", agents=["manus"], approval={"manus": RISKY}),
        id=f"gated-flow-{uuid.uuid4().hex[:8]}",
        task_queue=settings.task_queue,
    )
    step = time_skipping_env.client.get_workflow_handle(f"{flow.id}/step-1")
    await pending(step, "1.1")
    decided, waiting = await deliver_decision(
        time_skipping_env.client, flow.id, None, ApprovalAction.REJECT, reason="not in a flow", decided_by="tester"
    )
    assert (decided, waiting.id) == (step.id, "1.1")
    await flow.result()
    second_think = script.by_role["step-1"][1]
    replies = [m["content"] for m in second_think["messages"] if m["role"] == "tool"]
    assert replies == ["The user rejected this call: not in a flow"]
