"""A lost worker is not the tool's (or the model's) failure: a call or a
think whose last attempt ended because its worker went silent (SIGKILL here:
the heartbeat timeout) is scheduled again with its attempts counted afresh,
as often as the run's terms say (ActivityTerms.lost_worker_reschedules; a
think's in AgentProfile.think_terms), and only past that is the model told
(a think: the run fails as before). worker.py processes on the session's dev
server, the fake LLM."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import uuid

import pytest

from agent_model.profiles import MANUS, AgentProfile
from agent_model.run import AgentRunInput, AgentRunResult
from agent_model.state import AgentState
from prompts import agent_notes
from testkit.e2e import activity_attempts, child_env, has_heartbeated, server_address, start_worker, unique_queue, wait_until
from testkit.fake_openai import python, terminate
from tests.record_history import replayer
from tests.test_e2e import appending_code, stop_all, tagged
from tools import with_tool_terms
from workflows.agent import AgentWorkflow

pytestmark = pytest.mark.e2e

RUN_TIMEOUT = 90.0
"""A run here loses one or two workers, 4 s of heartbeat timeout each, and starts others."""


def profile_with(maximum_attempts: int, lost_worker_reschedules: int) -> AgentProfile:
    profile = with_tool_terms(MANUS)
    terms = profile.tool_terms["python_execute"]
    assert terms.activity is not None and terms.activity.lost_worker_reschedules == 3  # what a new run gets
    activity = terms.activity.model_copy(
        update={"maximum_attempts": maximum_attempts, "lost_worker_reschedules": lost_worker_reschedules}
    )
    return profile.model_copy(
        update={"tool_terms": {**profile.tool_terms, "python_execute": terms.model_copy(update={"activity": activity})}}
    )


async def start(dev_env, queue: str, profile: AgentProfile):
    return await dev_env.client.start_workflow(
        AgentWorkflow.run,
        AgentRunInput(task="Run the slow program", profile=profile),
        id=f"lost-call-{uuid.uuid4().hex[:8]}",
        task_queue=queue,
        result_type=AgentRunResult,
    )


async def lose_the_worker_under_the_call(worker, handle, log, starts: int) -> None:
    await wait_until(lambda: len(tagged(log, "tool")) >= starts, 60, f"execution {starts} of the tool")
    await wait_until(lambda: has_heartbeated(handle, "python_execute"), 10, "a heartbeat of the tool", 0.2)
    worker.kill()


async def summaries(handle, activity: str) -> list[str]:
    history = await handle.fetch_history()
    return [
        json.loads(e.user_metadata.summary.data)
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
        and e.activity_task_scheduled_event_attributes.activity_type.name == activity
    ]


async def test_a_call_whose_worker_is_lost_runs_again_with_its_retries_whole(dev_env, fake_llm, tmp_path):
    """One attempt allowed: before, the lost worker was the call's failure
    ("activity Heartbeat timeout") and the model was told the tool failed."""
    log = tmp_path / "executions.log"
    slow = appending_code(log, "tool", f"""\
        import time
        if len(open({str(log)!r}).read().splitlines()) == 1:
            time.sleep(30)
        print("tool finished")
        """)
    fake_llm.turns = [python(slow), terminate("done")]
    queue = unique_queue("lost-call")
    env = child_env(tmp_path, address=server_address(dev_env), task_queue=queue, base_url=fake_llm.base_url)
    logs = tmp_path / "logs"
    first = second = None
    try:
        first = start_worker(env, logs, name="worker1")
        handle = await start(dev_env, queue, profile_with(maximum_attempts=1, lost_worker_reschedules=3))
        await lose_the_worker_under_the_call(first, handle, log, starts=1)
        second = start_worker(env, logs, name="worker2")
        result = await asyncio.wait_for(handle.result(), RUN_TIMEOUT)
    finally:
        await stop_all(first, second)
    assert result.state == AgentState.FINISHED, result
    tool_call = result.steps[0].tool_calls[0]
    assert (tool_call.observation.strip(), tool_call.error) == ("tool finished", False)
    calls = [a for a in await activity_attempts(handle) if a[0] == "python_execute"]
    assert calls == [("python_execute", 1, None), ("python_execute", 1, None)], calls  # a new activity, attempt 1
    assert [s.endswith("(again: its worker was lost)") for s in await summaries(handle, "python_execute")] == [False, True]
    await replayer().replay_workflow(await handle.fetch_history())  # the new command path is deterministic


async def test_a_call_whose_workers_keep_being_lost_is_reported_to_the_model(dev_env, fake_llm, tmp_path):
    log = tmp_path / "executions.log"
    fake_llm.turns = [python(appending_code(log, "tool", "import time\ntime.sleep(60)\n")), terminate("gave up on it")]
    queue = unique_queue("lost-call-twice")
    env = child_env(tmp_path, address=server_address(dev_env), task_queue=queue, base_url=fake_llm.base_url)
    logs = tmp_path / "logs"
    workers = []
    try:
        workers.append(start_worker(env, logs, name="worker1"))
        handle = await start(dev_env, queue, profile_with(maximum_attempts=1, lost_worker_reschedules=1))
        await lose_the_worker_under_the_call(workers[0], handle, log, starts=1)
        workers.append(start_worker(env, logs, name="worker2"))
        await lose_the_worker_under_the_call(workers[1], handle, log, starts=2)
        workers.append(start_worker(env, logs, name="worker3"))
        result = await asyncio.wait_for(handle.result(), RUN_TIMEOUT)
    finally:
        await stop_all(*workers)
    tool_call = result.steps[0].tool_calls[0]
    assert tool_call.error
    assert tool_call.observation == agent_notes.LOST_CALL_OBSERVATION.format(tool="python_execute", times=2)
    assert len(tagged(log, "tool")) == 2, "scheduled once more than the first time, not again"
    assert result.state == AgentState.FINISHED and result.final_answer == "gave up on it", result


def profile_with_think_attempts(maximum_attempts: int) -> AgentProfile:
    profile = with_tool_terms(MANUS)
    terms = profile.think_terms
    assert terms is not None and terms.lost_worker_reschedules == 3  # what a new run gets
    return profile.model_copy(update={"think_terms": terms.model_copy(update={"maximum_attempts": maximum_attempts})})


async def test_a_think_whose_worker_is_lost_starts_over_with_its_retries_whole(dev_env, fake_llm, tmp_path):
    """One attempt allowed: before, the lost worker was the think's failure and
    the run ended in error ("activity Heartbeat timeout")."""
    answer = terminate("done")
    fake_llm.turns = [[dataclasses.replace(answer, delay=60), answer]]  # the first request is held
    queue = unique_queue("lost-think")
    env = child_env(tmp_path, address=server_address(dev_env), task_queue=queue, base_url=fake_llm.base_url)
    logs = tmp_path / "logs"
    first = second = None
    try:
        first = start_worker(env, logs, name="worker1")
        handle = await start(dev_env, queue, profile_with_think_attempts(1))
        await wait_until(lambda: has_heartbeated(handle, "think"), 60, "a heartbeat of the think", 0.2)
        first.kill()
        second = start_worker(env, logs, name="worker2")
        result = await asyncio.wait_for(handle.result(), RUN_TIMEOUT)
    finally:
        await stop_all(first, second)
    assert result.state == AgentState.FINISHED and result.final_answer == "done", result
    thinks = [a for a in await activity_attempts(handle) if a[0] == "think"]
    assert thinks == [("think", 1, None), ("think", 1, None)], thinks  # a new activity, attempt 1
    assert [s.endswith("(again: its worker was lost)") for s in await summaries(handle, "think")] == [False, True]
    await replayer().replay_workflow(await handle.fetch_history())
