"""`python starter.py chat` as the user runs it (starter.py's main in this
process, the dev server, an in-process worker): a follow-up to a finished run
goes on in the same conversation, the prompt loop, `show` per turn, and every
bad input one line."""

from __future__ import annotations

import io
import uuid

from agent_model.run import AgentRunInput, AgentRunResult
from agent_model.session import SessionTerms
from agent_model.state import AgentState
from testkit.e2e import wait_until
from testkit.fake_openai import Reply, call, terminate
from tests.test_run_control import harness  # noqa: F401 (a fixture)
from workflows.agent import AgentWorkflow


def user_texts(request) -> list[str]:
    return [str(m.get("content")) for m in request.messages if m["role"] == "user"]


async def test_a_follow_up_to_a_finished_run_goes_on_in_the_same_conversation(harness, fake_llm):  # noqa: F811
    fake_llm.turns = [
        Reply(tool_calls=[call("python_execute", {"code": "open('note.txt', 'w').write('remembered')"})]),
        terminate("first answer"),
        Reply(tool_calls=[call("python_execute", {"code": "print(open('note.txt').read())"})]),
        terminate("second answer"),
        terminate("third answer"),
    ]
    handle = await harness.start("write a note")
    first = await handle.result()
    assert first.final_answer == "first answer"

    out = await harness.cli("chat", handle.id, "read the note back")
    assert f"{handle.id}: turn 2 starts now (the run went on in a new execution)" in out
    assert "[3/" in out and "remembered" in out  # the step lines, and the workspace file of turn 1
    assert "turn 2: finished: the agent ended its task (steps 3-4)" in out and out.count("second answer") >= 1
    assert f"python starter.py chat {handle.id}" in out
    assert "write a note" in user_texts(fake_llm.requests[2])[0] and "read the note back" in user_texts(fake_llm.requests[2])

    # The new execution is a session: the next message goes to it while it is open.
    out = await harness.cli("chat", handle.id, "and once more")
    assert f"{handle.id}: turn 3 starts now" in out and "(the run went on" not in out and "third answer" in out

    out = await harness.cli("show", handle.id)
    assert out.index("══ turn 1: write a note ══") < out.index("── step 1 ──")
    assert out.index("── step 2 ──") < out.index("══ turn 2: read the note back ══") < out.index("── step 3 ──")
    assert out.index("══ turn 3: and once more ══") < out.index("── step 5 ──")
    status = await harness.dev_env.client.get_workflow_handle_for(AgentWorkflow.run, handle.id).query(AgentWorkflow.status)
    assert status.state == AgentState.IDLE and status.step == 5
    await harness.cli("cancel", handle.id)


async def test_bad_follow_ups_are_one_line_each(harness, fake_llm):  # noqa: F811
    fake_llm.turns = [Reply(tool_calls=[call("python_execute", {"code": "import time; time.sleep(30)"})]), terminate("x")]
    handle = await harness.start()
    assert "no run with id 'nope'" in await harness.cli("chat", "nope", "hello", expect=2)
    assert "the message is empty" in await harness.cli("chat", handle.id, "  ", expect=2)
    assert "over [session] message_chars" in await harness.cli("chat", handle.id, "x" * 40_000, expect=2)
    assert "was not started as a session" in await harness.cli("chat", handle.id, "hello", expect=2)
    assert "asks for it in a terminal" in await harness.cli("chat", handle.id, expect=2)
    assert "is for a new session" in await harness.cli("chat", handle.id, "hi", "--agent", "swe", expect=2)
    await harness.cli("cancel", handle.id)
    assert "ended CANCELLED; only a run that completed" in await harness.cli("chat", handle.id, "hi", expect=2)


async def test_a_flow_and_its_steps_take_no_follow_up(harness, fake_llm):  # noqa: F811
    from tests.test_planning_flow import FlowScript, plan_reply, start_flow

    sleeping = Reply(tool_calls=[call("python_execute", {"code": "import time; time.sleep(30)"})])
    fake_llm.responder = FlowScript(plan_reply("Wait a while"), {1: [sleeping, terminate("x")]})
    flow = await start_flow(harness.dev_env, harness.settings, agents=["manus"])
    await wait_until(lambda: len(fake_llm.requests) >= 2, 30, "the flow's first step")
    assert "is a planning flow, which takes no follow-up" in await harness.cli("chat", flow.id, "hi", expect=2)
    out = await harness.cli("chat", f"{flow.id}/step-1", "hi", expect=2)
    assert f"is a step of flow {flow.id}; a flow's step takes no follow-up" in out
    await harness.cli("cancel", flow.id)


class TypedLines(io.StringIO):
    """What a person types in a terminal: these lines, then the end of input."""

    def isatty(self) -> bool:
        return True


async def test_the_prompt_loop_opens_a_session_and_asks_after_each_answer(harness, fake_llm, monkeypatch):  # noqa: F811
    fake_llm.turns = [terminate("hello there"), terminate("second reply")]
    run_id = f"chat-{uuid.uuid4().hex[:8]}"
    monkeypatch.setattr("sys.stdin", TypedLines("say hello\nnow say more\n\n"))
    out = await harness.cli("chat", "--id", run_id)
    assert "Enter your task: " in out and f"session {run_id}" in out
    assert out.index("hello there") < out.index("you> ") < out.index("turn 2 starts now") < out.index("second reply")
    assert out.rstrip().endswith(f'come back with: python starter.py chat {run_id} "..." (or later: the run goes on from where it ended)')
    handle = harness.dev_env.client.get_workflow_handle(run_id, result_type=AgentRunResult)
    assert (await handle.query(AgentWorkflow.session)).turn == 2
    started = (await handle.fetch_history()).events[0].workflow_execution_started_event_attributes
    (run,) = harness.dev_env.client.data_converter.payload_converter.from_payloads(list(started.input.payloads), [AgentRunInput])
    assert run.session == SessionTerms(idle_seconds=30 * 60)
    await harness.cli("cancel", run_id)


async def test_an_update_to_a_run_that_closed_meanwhile_falls_back_to_the_closed_path(harness, fake_llm):  # noqa: F811
    """The race of an open session that ends between the describe and the update."""
    from runtime.follow_up import to_open_run

    fake_llm.turns = [terminate("done")]
    handle = await harness.start()
    await handle.result()
    assert await to_open_run(harness.dev_env.client, handle.id, "too late") is None
