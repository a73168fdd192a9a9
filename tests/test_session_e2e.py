"""A session survives its worker: worker.py is SIGKILLed while the session
waits idle between two turns, a fresh worker.py takes the follow-up that
`chat ID "..."` sends, and the second turn sees the first turn's memory and
files (real worker processes, the dev server, the fake LLM over HTTP)."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from agent_model.run import AgentRunInput, AgentRunResult
from agent_model.session import SessionTerms, SessionView
from testkit.cli import cli_environment
from testkit.e2e import child_env, server_address, start_worker, unique_queue, wait_until
from testkit.fake_openai import Reply, call, terminate
from workflows.agent import AgentWorkflow

pytestmark = pytest.mark.e2e


async def test_a_follow_up_after_the_worker_was_killed_between_turns(dev_env, fake_llm, tmp_path, cli):
    fake_llm.turns = [
        Reply(tool_calls=[call("python_execute", {"code": "open('kept.txt', 'w').write('from turn one')"})]),
        terminate("turn one done"),
        Reply(tool_calls=[call("python_execute", {"code": "print(open('kept.txt').read())"})]),
        terminate("turn two done"),
    ]
    queue = unique_queue("session-kill")
    env = child_env(tmp_path, address=server_address(dev_env), task_queue=queue, base_url=fake_llm.base_url)
    first = start_worker(env, tmp_path / "logs", "worker-1")
    run_id = f"session-{uuid.uuid4().hex[:8]}"
    handle = await dev_env.client.start_workflow(
        AgentWorkflow.run,
        AgentRunInput(task="keep a note", agent="manus", session=SessionTerms(idle_seconds=600)),
        id=run_id, task_queue=queue, result_type=AgentRunResult,
    )

    async def idle_after(turn: int) -> bool:
        view: SessionView | None = await handle.query(AgentWorkflow.session)
        return view is not None and view.idle and view.turn == turn

    try:
        await wait_until(lambda: idle_after(1), 60, "the first turn's end", 0.2)
        first.kill()
        await first.wait(10)
    finally:
        await first.stop()

    second = start_worker(env, tmp_path / "logs", "worker-2")
    try:
        done = await cli.in_thread("chat", run_id, "read the note", "--worker", "never", env_extra=cli_environment(env))
        assert done.returncode == 0, done
        assert "turn 2 starts now" in done.stdout and "from turn one" in done.stdout
        assert "turn 2: finished: the agent ended its task (steps 3-4)" in done.stdout and "turn two done" in done.stdout
        texts = [m.get("content") for m in fake_llm.requests[2].messages if m["role"] == "user"]
        assert "keep a note" in str(texts[0]) and "read the note" in texts
        steps = await handle.query(AgentWorkflow.steps, 0)
        assert [(r.step, r.turn) for r in steps] == [(1, 1), (2, 1), (3, 2), (4, 2)]
        await handle.cancel()
        await asyncio.sleep(0)
    finally:
        await second.stop()
