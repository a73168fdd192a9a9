"""The run goes on when the starter stops: in the default mode the worker the
starter starts for its run is a process of its own (worker.py --idle-exit),
so Ctrl-C stops the following, not the run; a second run reuses that worker,
and the worker exits by itself once no run is open on its task queue.

Real components: starter.py as a process in its own group, SIGINT to that
group as a terminal's Ctrl-C sends it, the dev server, the fake LLM.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import stat

import pytest

from agent_model.run import AgentRunResult
from testkit.e2e import child_env, pid_alive, server_address, start_starter, unique_queue, wait_until
from testkit.fake_openai import Reply, python, terminate

pytestmark = pytest.mark.e2e

TASK = "Compute 17*23 with python and tell me the result"
ANSWER = "17*23 = 391"
IDLE_EXIT = 8
STOPPED = re.compile(
    r"^stopped following; the run goes on in worker (\d+) \(log (\S+)\); "
    r"follow it again with: python starter.py attach (\S+)$"
)


def run_id_of(child) -> str:
    found = re.search(r"^run (\S+)$", child.stdout(), re.M)
    assert found, child.describe()
    return found.group(1)


async def worker_identities(client, run_id: str) -> set[str]:
    """The identities of the workers that took the run's activities."""
    history = await client.get_workflow_handle(run_id).fetch_history()
    return {
        e.activity_task_started_event_attributes.identity
        for e in history.events
        if e.HasField("activity_task_started_event_attributes")
    }


async def test_ctrl_c_leaves_the_run_to_a_worker_that_outlives_the_starter(dev_env, fake_llm, tmp_path):
    # The first think is slow: the SIGINT comes in the middle of the run.
    fake_llm.turns = [Reply(tool_calls=python("print(17*23)").tool_calls, delay=3), terminate(ANSWER)]
    env = child_env(
        tmp_path, address=server_address(dev_env), task_queue=unique_queue("outlive"), base_url=fake_llm.base_url,
        extra={"DURABLE_MANUS_WORKER_IDLE_EXIT": str(IDLE_EXIT)},
    )
    logs = tmp_path / "logs"
    starter = start_starter([TASK], env, logs, name="interrupted")
    pid = None
    try:
        await fake_llm.await_requests(1, timeout=60)
        run_id = run_id_of(starter)
        starter.signal_group(signal.SIGINT)
        assert await starter.wait(30) == 130, starter.describe()

        last = starter.stderr().strip().splitlines()[-1]
        said = STOPPED.match(last)
        assert said, starter.describe()
        pid, log = int(said.group(1)), said.group(2)
        assert said.group(3) == run_id
        assert pid_alive(pid), starter.describe()
        assert stat.S_IMODE((tmp_path / "data").stat().st_mode) == 0o700
        assert log.startswith(str(tmp_path / "data")), log
        assert stat.S_IMODE(os.stat(log).st_mode) == 0o600

        # Nobody attaches: the run ends on the worker the starter left behind.
        result = await dev_env.client.get_workflow_handle(run_id, result_type=AgentRunResult).result()
        assert result.final_answer == ANSWER
        me = f"{pid}@{socket.gethostname()}"
        assert await worker_identities(dev_env.client, run_id) == {me}

        # A second run reuses it: no second worker for the same queue.
        fake_llm.turns = [python("print(17*23)"), terminate(ANSWER)]
        second = start_starter([TASK], env, logs, name="second")
        assert await second.wait(60) == 0, second.describe()
        assert f"worker {pid} (log {log}) serves task queue" in second.stdout(), second.describe()
        assert "starting a worker" not in second.stdout(), second.describe()
        assert await worker_identities(dev_env.client, run_id_of(second)) == {me}

        # With no run left on its task queue, it exits by itself.
        await wait_until(lambda: not pid_alive(pid), IDLE_EXIT + 30, "the idle worker's exit", 0.2)
        assert f"no run open on task queue {env['TEMPORAL_TASK_QUEUE']}" in open(log).read()
    finally:
        await starter.stop()
        if pid is not None and pid_alive(pid):
            os.kill(pid, signal.SIGKILL)


async def test_two_starters_at_once_share_one_worker(dev_env, fake_llm, tmp_path):
    fake_llm.turns = [python("print(17*23)"), terminate(ANSWER)]
    env = child_env(
        tmp_path, address=server_address(dev_env), task_queue=unique_queue("shared"), base_url=fake_llm.base_url,
        extra={"DURABLE_MANUS_WORKER_IDLE_EXIT": str(IDLE_EXIT)},
    )
    logs = tmp_path / "logs"
    starters = [start_starter([TASK], env, logs, name=f"starter-{n}") for n in range(2)]
    try:
        for starter in starters:
            assert await starter.wait(90) == 0, starter.describe()
        identities = [await worker_identities(dev_env.client, run_id_of(s)) for s in starters]
        assert len(identities[0]) == 1 and identities[0] == identities[1], identities
        pid = int(next(iter(identities[0])).partition("@")[0])
        await wait_until(lambda: not pid_alive(pid), IDLE_EXIT + 30, "the idle worker's exit", 0.2)
    finally:
        for starter in starters:
            await starter.stop()
