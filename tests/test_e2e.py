"""End-to-end and crash tests: worker.py and starter.py as real processes on
the session's Temporal dev server, the LLM played by the fake OpenAI server.

The crash tests SIGKILL a worker's whole process group mid-activity, start a
fresh worker and check what Temporal promises: completed activities (LLM
calls, tool runs) are not repeated after the crash; the interrupted one is
retried once its heartbeat timeout notices the dead worker.
"""

from __future__ import annotations

import asyncio
import re
import signal
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from agent_model.run import AgentRunInput, AgentRunResult
from agent_model.state import AgentState, StopReason
from testkit.e2e import (
    Child,
    activity_attempts,
    has_heartbeated,
    child_env,
    completed_turns,
    kill_tool_process,
    lines_of,
    pid_alive,
    requests_for_turn,
    server_address,
    start_starter,
    start_worker,
    unique_queue,
    wait_until,
)
from testkit.fake_openai import Reply, call, python, terminate
from workflows.agent import AgentWorkflow

pytestmark = pytest.mark.e2e

TASK = "Compute 17*23 with python and tell me the result"
ANSWER = "17*23 = 391"
RUN_TIMEOUT = 60.0
"""Upper bound for one run on this machine; normal runs take a few seconds."""
THINK_HEARTBEAT_TIMEOUT = 4.0
"""activities.llm.THINK_OPTIONS heartbeat_timeout, restated so a change is noticed."""


def compute_script() -> list[Reply]:
    return [python("print(17*23)"), terminate(ANSWER)]


def assert_followed_to_the_end(child: Child, code: int) -> None:
    out = child.stdout()
    assert code == 0, child.describe()
    assert re.search(r"^run \S+$", out, re.M), child.describe()
    assert re.search(r"^\[1/\d+\] python_execute → 391$", out, re.M), child.describe()
    assert re.search(r"^finished: the agent ended its task \(2 steps, \d+ tokens\)$", out, re.M), child.describe()
    assert ANSWER in out.splitlines(), child.describe()


async def stop_all(*children: Child | None) -> None:
    for child in children:
        if child is not None:
            await child.stop()


# ---- starter + worker ----------------------------------------------------------


async def test_starter_and_worker_as_processes(dev_env, fake_llm, tmp_path):
    fake_llm.turns = compute_script()
    env = child_env(tmp_path, address=server_address(dev_env), task_queue=unique_queue(), base_url=fake_llm.base_url)
    logs = tmp_path / "logs"
    worker = starter = None
    try:
        worker = start_worker(env, logs)
        starter = start_starter([TASK, "--worker", "never"], env, logs)
        code = await starter.wait(RUN_TIMEOUT)
        assert_followed_to_the_end(starter, code)
        assert len(fake_llm.completed()) == 2, [(r.turn, r.attempt, r.completed) for r in fake_llm.requests]
        assert [r.turn for r in fake_llm.completed()] == [0, 1]
        assert worker.returncode is None, worker.describe()  # still polling

        # SIGTERM is a graceful shutdown: exit code 0, no traceback.
        worker.signal_group(signal.SIGTERM)
        assert await worker.wait(15) == 0, worker.describe()
        assert "Traceback" not in worker.stderr(), worker.describe()
    finally:
        await stop_all(starter, worker)


async def test_starter_with_its_own_worker(dev_env, fake_llm, tmp_path):
    """--worker auto with nobody polling the queue: the starter starts a worker
    (in the background: runtime/detached_worker.py) that runs the run to the end."""
    fake_llm.turns = compute_script()
    env = child_env(tmp_path, address=server_address(dev_env), task_queue=unique_queue(), base_url=fake_llm.base_url)
    starter = None
    try:
        starter = start_starter([TASK, "--worker", "auto"], env, tmp_path / "logs")
        code = await starter.wait(RUN_TIMEOUT)
        assert_followed_to_the_end(starter, code)
        assert len(fake_llm.completed()) == 2
        # The run directory was made under WORKSPACE_ROOT, not in the repo.
        run_id = re.search(r"^run (\S+)$", starter.stdout(), re.M).group(1)
        assert (tmp_path / "workspace" / run_id).is_dir()
    finally:
        await stop_all(starter)


async def test_starter_detach_then_attach(dev_env, fake_llm, tmp_path):
    fake_llm.turns = compute_script()
    env = child_env(tmp_path, address=server_address(dev_env), task_queue=unique_queue(), base_url=fake_llm.base_url)
    logs = tmp_path / "logs"
    run_id = f"e2e-detach-{uuid.uuid4().hex[:8]}"
    detached = attached = None
    try:
        began = time.monotonic()
        detached = start_starter([TASK, "--detach", "--id", run_id], env, logs, name="detach")
        code = await detached.wait(30)
        took = time.monotonic() - began
        assert code == 0, detached.describe()
        assert f"run {run_id}" in detached.stdout().splitlines(), detached.describe()
        # Nothing followed the run and no worker ran it: no step line, no LLM call.
        assert "[1/" not in detached.stdout(), detached.describe()
        assert fake_llm.requests == []
        assert took < 15, f"--detach took {took:.1f} s"
        handle = dev_env.client.get_workflow_handle(run_id)
        assert (await handle.describe()).status.name == "RUNNING"

        # --attach with nobody polling: its own worker runs the run to the end.
        attached = start_starter(["attach", run_id], env, logs, name="attach")
        code = await attached.wait(RUN_TIMEOUT)
        assert_followed_to_the_end(attached, code)
        assert f"run {run_id}" in attached.stdout().splitlines()
        assert len(fake_llm.completed()) == 2
    finally:
        await stop_all(detached, attached)


# ---- crashes ---------------------------------------------------------------------


def appending_code(log: Path, tag: str, then: str = "") -> str:
    """Python for python_execute: append `tag pid` to a file outside the
    workspace (so the test can count executions), then run `then`."""
    return textwrap.dedent(
        f"""\
        import os
        with open({str(log)!r}, "a") as f:
            f.write({tag!r} + " " + str(os.getpid()) + "\\n")
        """
    ) + textwrap.dedent(then)


async def start_run(dev_env, queue: str, task: str):
    return await dev_env.client.start_workflow(
        AgentWorkflow.run,
        AgentRunInput(task=task, agent="manus"),
        id=f"e2e-crash-{uuid.uuid4().hex[:8]}",
        task_queue=queue,
        result_type=AgentRunResult,
    )


def tagged(log: Path, tag: str) -> list[str]:
    return [line for line in lines_of(log) if line.split(" ", 1)[0] == tag]


async def test_crash_during_think_resumes_without_repeating_completed_calls(dev_env, fake_llm, tmp_path):
    log = tmp_path / "executions.log"
    second_call = [call("python_execute", {"code": appending_code(log, "turn1", "print('ok')\n")})]
    fake_llm.turns = [
        python(appending_code(log, "turn0", "print(17*23)\n")),
        Reply(tool_calls=second_call, delay=30),  # the worker dies while waiting for this
        terminate(ANSWER),
    ]
    queue = unique_queue("crash-think")
    env = child_env(tmp_path, address=server_address(dev_env), task_queue=queue, base_url=fake_llm.base_url)
    logs = tmp_path / "logs"
    first = second = None
    try:
        first = start_worker(env, logs, name="worker1")
        handle = await start_run(dev_env, queue, TASK)
        await wait_until(lambda: requests_for_turn(fake_llm, 1), 30, "the slow turn-1 think to reach the LLM")
        # Kill a think that is alive and heartbeating (every second while it waits).
        await wait_until(lambda: has_heartbeated(handle, "think"), 10, "a heartbeat of the slow think", 0.2)
        killed_at = time.monotonic()
        first.kill()

        fake_llm.turns[1] = Reply(tool_calls=second_call)  # the retry gets its answer at once

        second = start_worker(env, logs, name="worker2")
        await wait_until(lambda: completed_turns(fake_llm, 1), 40, "the retried turn-1 think")
        result = await asyncio.wait_for(handle.result(), RUN_TIMEOUT)

        first_done = completed_turns(fake_llm, 1)[0]
        resume = first_done.received_at - second.started_at
        print(
            f"\n[crash during think] new worker start -> next completed think: {resume:.1f} s "
            f"(kill -> completed think: {first_done.received_at - killed_at:.1f} s; "
            f"heartbeat timeout {THINK_HEARTBEAT_TIMEOUT:.0f} s, start_to_close 10 min)"
        )
        assert resume < 30, f"resume took {resume:.1f} s: the dead attempt waited for more than its heartbeat timeout"

        assert (result.state, result.stop_reason) == (AgentState.FINISHED, StopReason.TERMINATED), result
        assert result.final_answer == ANSWER
        assert [len(completed_turns(fake_llm, t)) for t in (0, 1, 2)] == [1, 1, 1], [
            (r.turn, r.attempt, r.completed) for r in fake_llm.requests
        ]
        assert len(requests_for_turn(fake_llm, 1)) == 2  # the killed call and its retry
        assert len(requests_for_turn(fake_llm, 0)) == 1
        assert len(tagged(log, "turn0")) == 1, lines_of(log)  # python_execute ran once
        assert len(tagged(log, "turn1")) == 1, lines_of(log)
        assert result.steps[0].tool_calls[0].observation.strip() == "391"
        # The server, not the 10-minute start_to_close, declared the dead attempt lost.
        assert await activity_attempts(handle) == [
            ("think", 1, None),
            ("python_execute", 1, None),
            # The new worker lacks the run's cached context and reads it from
            # the shared store: no failed attempt, nothing resent.
            ("think", 2, "TIMEOUT_TYPE_HEARTBEAT"),
            ("python_execute", 1, None),
            ("think", 1, None),
        ]
    finally:
        await stop_all(first, second)


async def test_crash_during_tool_call_resumes(dev_env, fake_llm, tmp_path):
    log = tmp_path / "executions.log"
    # The first execution sleeps (the worker is killed meanwhile); the retry,
    # seeing an earlier line in the log, finishes at once.
    slow = appending_code(
        log,
        "tool",
        f"""\
        import time
        if len(open({str(log)!r}).read().splitlines()) == 1:
            time.sleep(30)
        print("tool finished")
        """,
    )
    fake_llm.turns = [python(slow), terminate(ANSWER)]
    queue = unique_queue("crash-tool")
    env = child_env(tmp_path, address=server_address(dev_env), task_queue=queue, base_url=fake_llm.base_url)
    logs = tmp_path / "logs"
    first = second = None
    tool_pids: list[int] = []
    try:
        first = start_worker(env, logs, name="worker1")
        handle = await start_run(dev_env, queue, TASK)
        await wait_until(lambda: tagged(log, "tool"), 30, "the tool to start")
        tool_pids.append(int(tagged(log, "tool")[0].split()[1]))
        await wait_until(lambda: has_heartbeated(handle, "python_execute"), 10, "a heartbeat of the tool", 0.2)
        first.kill()
        # The tool runs in its own session, so killing the worker's group does not
        # reach it: its parent-death signal must, or it would run beside its retry.
        await wait_until(lambda: not pid_alive(tool_pids[0]), 5, "the orphaned tool process to die", 0.05)

        second = start_worker(env, logs, name="worker2")
        result = await asyncio.wait_for(handle.result(), RUN_TIMEOUT)
        took = time.monotonic() - second.started_at
        print(f"\n[crash during tool] new worker start -> run finished: {took:.1f} s")

        assert (result.state, result.stop_reason) == (AgentState.FINISHED, StopReason.TERMINATED), result
        starts = tagged(log, "tool")
        tool_pids[1:] = [int(line.split()[1]) for line in starts[1:]]
        assert len(starts) == 2, starts  # the interrupted run and its retry
        assert result.steps[0].tool_calls[0].observation.strip() == "tool finished"
        assert not result.steps[0].tool_calls[0].error
        # The think calls that completed before the crash were not repeated.
        assert [len(completed_turns(fake_llm, t)) for t in (0, 1)] == [1, 1]
        assert len(fake_llm.requests) == 2
        assert await activity_attempts(handle) == [
            ("think", 1, None),
            ("python_execute", 2, "TIMEOUT_TYPE_HEARTBEAT"),
            ("think", 1, None),  # the new worker reads the window from the shared store
        ]
    finally:
        await stop_all(first, second)
        for pid in tool_pids:
            kill_tool_process(pid)


# ---- several workers ----------------------------------------------------------------


async def workflow_pollers(client, task_queue: str) -> set[str]:
    from temporalio.api.enums.v1 import TaskQueueType
    from temporalio.api.taskqueue.v1 import TaskQueue
    from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest

    response = await client.workflow_service.describe_task_queue(
        DescribeTaskQueueRequest(
            namespace=client.namespace,
            task_queue=TaskQueue(name=task_queue),
            task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
        )
    )
    return {p.identity for p in response.pollers}


async def test_with_two_workers_each_run_thinks_where_its_context_is(dev_env, fake_llm, tmp_path):
    """The server gives a run's workflow tasks to the worker that has the run
    cached, and that worker runs the think it schedules eagerly: thinks find
    the run's context in that worker's cache instead of resending the window."""
    steps = 5
    fake_llm.turns = [python(f"print({i})") for i in range(steps - 1)] + [terminate("done")]
    queue = unique_queue()
    env = child_env(tmp_path, address=server_address(dev_env), task_queue=queue, base_url=fake_llm.base_url)
    workers = []
    try:
        workers = [start_worker(env, tmp_path / "logs", name=f"worker{i}") for i in (1, 2)]
        deadline = time.monotonic() + 30
        while len(await workflow_pollers(dev_env.client, queue)) < 2:
            assert time.monotonic() < deadline, "the two workers did not start polling"
            await asyncio.sleep(0.2)
        handles = [
            await dev_env.client.start_workflow(
                AgentWorkflow.run,
                AgentRunInput(task=f"run {i}", agent="manus"),
                id=f"two-workers-{uuid.uuid4().hex[:8]}",
                task_queue=queue,
            )
            for i in range(6)
        ]
        results: list[AgentRunResult] = [await asyncio.wait_for(h.result(), RUN_TIMEOUT) for h in handles]
        assert [(r.stop_reason, r.steps_taken) for r in results] == [(StopReason.TERMINATED, steps)] * len(handles)

        workers_used, misses = set(), 0
        for handle in handles:
            async for event in handle.fetch_history_events():
                if event.HasField("activity_task_started_event_attributes"):
                    workers_used.add(event.activity_task_started_event_attributes.identity)
                if event.HasField("activity_task_failed_event_attributes"):
                    failure = event.activity_task_failed_event_attributes.failure
                    misses += failure.application_failure_info.type == "ThinkContextMissing"
        assert len(workers_used) == 2, workers_used  # both workers took part
        assert misses == 0
    finally:
        await stop_all(*workers)
