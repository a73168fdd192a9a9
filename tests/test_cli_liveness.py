"""starter.py never waits silently and never hangs on a worker that is gone; a
run that ends without a result, or a server that goes away, is one line.

Real components throughout: starter.py and worker.py as processes, the dev
server (the session's, or one of the test's own where the test kills it or
sets its limits), the fake LLM over HTTP.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from runtime.embedded_server import start_dev_server_command
from runtime.worker_factory import build_worker
from testkit.e2e import (
    Child,
    child_env,
    free_port,
    server_address,
    start_starter,
    start_worker,
    unique_queue,
    wait_until,
)
from testkit.fake_openai import Reply, python, terminate
from testkit.settings import make_settings

pytestmark = pytest.mark.e2e

TASK = "Compute 17*23 with python and tell me the result"
ANSWER = "17*23 = 391"
COMMAND_BOUND = 40.0
"""Upper bound for one command; a normal run takes a few seconds."""


def script() -> list:
    """Good for any number of runs: every run's turn k gets turns[k]."""
    return [python("print(17*23)"), terminate(ANSWER)]


def finished(child: Child, code: int) -> None:
    assert code == 0, child.describe()
    assert ANSWER in child.stdout().splitlines(), child.describe()


def run_id_of(child: Child) -> str:
    found = re.search(r"^run (\S+)$", child.stdout(), re.M)
    assert found, child.describe()
    return found.group(1)


def assert_no_noise(child: Child) -> None:
    """No traceback and no retry warning of the Temporal core anywhere."""
    for text in (child.stdout(), child.stderr()):
        assert "Traceback" not in text, child.describe()
        assert "WARN" not in text and "temporalio_client" not in text, child.describe()


def stderr_lines(child: Child) -> list[str]:
    # The tool-sandbox notice of an in-process worker is logged, not an error.
    return [line for line in child.stderr().splitlines() if line.strip() and not line.startswith("tool sandbox:")]


@pytest.fixture
def env(dev_env, fake_llm, tmp_path):
    return child_env(tmp_path, address=server_address(dev_env), task_queue=unique_queue("live"), base_url=fake_llm.base_url)


async def stop_all(children: list[Child]) -> None:
    for child in children:
        await child.stop()


# ---- a worker that is gone is not waited for ------------------------------------------


async def test_back_to_back_commands_each_finish(env, fake_llm, tmp_path):
    """Each command's in-process worker exits with it, while the server still
    lists it as a poller for about a minute; the next command must not count on it."""
    fake_llm.turns = script()
    logs, children = tmp_path / "logs", []
    env = {**env, "DURABLE_MANUS_WORKER_IDLE_EXIT": "0"}  # workers in the starters (tests/test_run_outlives_starter.py: detached)
    try:
        first = start_starter([TASK], env, logs, name="first")
        children.append(first)
        finished(first, await first.wait(COMMAND_BOUND))

        show = start_starter(["show", run_id_of(first)], env, logs, name="show")
        children.append(show)
        assert await show.wait(COMMAND_BOUND) == 0, show.describe()
        assert "── step 1 ──" in show.stdout(), show.describe()

        second = start_starter([TASK], env, logs, name="second")
        children.append(second)
        finished(second, await second.wait(COMMAND_BOUND))
        for child in children:
            assert_no_noise(child)
    finally:
        await stop_all(children)


async def test_attach_right_after_a_crash_finishes(env, fake_llm, tmp_path):
    # The first think is slow, so the starter dies in the middle of it; the
    # retry after the heartbeat timeout is answered at once.
    fake_llm.turns = [[Reply(content="slowly", tool_calls=python("print(17*23)").tool_calls, delay=60), python("print(17*23)")],
                      terminate(ANSWER)]
    logs, children = tmp_path / "logs", []
    env = {**env, "DURABLE_MANUS_WORKER_IDLE_EXIT": "0"}  # the worker runs in the starter, and dies with it
    try:
        crashed = start_starter([TASK], env, logs, name="crashed")
        children.append(crashed)
        await fake_llm.await_requests(1, timeout=30)
        run_id = run_id_of(crashed)
        crashed.kill()

        attached = start_starter(["attach", run_id], env, logs, name="attach")
        children.append(attached)
        finished(attached, await attached.wait(COMMAND_BOUND))
        assert_no_noise(attached)
    finally:
        await stop_all(children)


async def test_a_listed_worker_of_another_machine_that_is_gone(dev_env, env, fake_llm, tmp_path):
    """A poller whose identity names another machine cannot be checked locally:
    the run's untaken task is the evidence, and the starter runs a worker."""
    fake_llm.turns = script()
    settings = make_settings(fake_llm.base_url, tmp_path / "workspace")
    settings.task_queue = env["TEMPORAL_TASK_QUEUE"]
    async with build_worker(dev_env.client, settings, identity="4242@another-machine"):
        await asyncio.sleep(1)  # it polls, and the server lists it
    starter = start_starter([TASK], env, tmp_path / "logs")
    try:
        finished(starter, await starter.wait(COMMAND_BOUND))
        assert "the run goes on in worker" in starter.stdout(), starter.describe()
        assert_no_noise(starter)
    finally:
        await starter.stop()


# ---- no silent waits --------------------------------------------------------------------


async def test_waiting_for_a_worker_is_said_within_5_seconds(env, fake_llm, tmp_path):
    # A slow first think, so that the starter sees the worker take the run.
    fake_llm.turns = [Reply(tool_calls=python("print(17*23)").tool_calls, delay=3), terminate(ANSWER)]
    logs, children = tmp_path / "logs", []
    try:
        starter = start_starter(["--worker", "never", TASK], env, logs)
        children.append(starter)
        said = await wait_until(lambda: "waiting for a worker" in starter.stdout(), 15, "the waiting line")
        assert said - starter.started_at <= 5.0, starter.describe()
        (line,) = [l for l in starter.stdout().splitlines() if "waiting for a worker" in l]
        assert "python worker.py" in line and "--worker never" in line, line

        worker = start_worker(env, logs)
        children.append(worker)
        finished(starter, await starter.wait(COMMAND_BOUND))
        assert "a worker has taken the run's task" in starter.stdout(), starter.describe()
    finally:
        await stop_all(children)


async def test_detach_says_whether_a_worker_runs(dev_env, env, fake_llm, tmp_path):
    fake_llm.turns = script()
    logs, children = tmp_path / "logs", []
    try:
        alone = start_starter(["--detach", TASK], env, logs, name="alone")
        children.append(alone)
        assert await alone.wait(COMMAND_BOUND) == 0, alone.describe()
        out = alone.stdout()
        assert f"no worker is running for task queue {env['TEMPORAL_TASK_QUEUE']}" in out, alone.describe()
        assert "python worker.py" in out and f"attach {run_id_of(alone)}" in out, alone.describe()
        assert fake_llm.requests == []

        worker = start_worker(env, logs)
        children.append(worker)
        await asyncio.wait_for(dev_env.client.get_workflow_handle(run_id_of(alone)).result(), COMMAND_BOUND)
        served = start_starter(["--detach", TASK], env, logs, name="served")
        children.append(served)
        assert await served.wait(COMMAND_BOUND) == 0, served.describe()
        assert "a worker is running" in served.stdout() and "has taken the run" in served.stdout(), served.describe()
    finally:
        await stop_all(children)


# ---- a run that ends without a result ---------------------------------------------------


async def test_a_run_terminated_from_outside_is_one_line(dev_env, env, fake_llm, tmp_path):
    fake_llm.turns = [Reply(content="slowly", tool_calls=python("print(1)").tool_calls, delay=60), terminate(ANSWER)]
    starter = start_starter([TASK], env, tmp_path / "logs")
    try:
        await fake_llm.await_requests(1, timeout=30)
        run_id = run_id_of(starter)
        await dev_env.client.get_workflow_handle(run_id).terminate(reason="the operator needs the machine")
        code = await starter.wait(20)
        assert code == 1, starter.describe()
        (line,) = stderr_lines(starter)
        assert f"run {run_id} was terminated" in line and "the operator needs the machine" in line, line
        assert_no_noise(starter)
    finally:
        await starter.stop()


# ---- the test's own server: limits, and killing it ----------------------------------------


class OwnServer:
    """A dev server started as the embedded one is, on free ports, in its own session."""

    def __init__(self, directory: Path, *extra: str) -> None:
        self.directory, self.extra = directory, extra
        self.port, self.ui_port = free_port(), free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None

    async def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        command = start_dev_server_command(self.directory / "temporal.db", port=self.port, ui_port=self.ui_port)
        with open(self.directory / "server.log", "ab") as log:
            self.process = subprocess.Popen(
                [*command, *self.extra], stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        await wait_until(self.answers, 60, "the test's dev server", 0.2)

    def answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                return True
        except OSError:
            return False

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)


@pytest.fixture
async def own_server(tmp_path):
    servers: list[OwnServer] = []

    async def make(*extra: str) -> OwnServer:
        server = OwnServer(tmp_path / f"server-{len(servers)}", *extra)
        servers.append(server)
        await server.start()
        return server

    yield make
    for server in servers:
        server.kill()


def own_env(tmp_path, server: OwnServer, fake_llm) -> dict[str, str]:
    return child_env(tmp_path, address=server.address, task_queue=unique_queue("own"), base_url=fake_llm.base_url)


async def test_server_killed_while_following(own_server, fake_llm, tmp_path):
    fake_llm.turns = [Reply(content="slowly", tool_calls=python("print(1)").tool_calls, delay=120), terminate(ANSWER)]
    server = await own_server()
    # The starter waits DURABLE_MANUS_SERVER_WAIT seconds (default 60) for the server to come back.
    env = {**own_env(tmp_path, server, fake_llm), "DURABLE_MANUS_SERVER_WAIT": "8"}
    starter = start_starter([TASK], env, tmp_path / "logs")
    try:
        await fake_llm.await_requests(1, timeout=30)
        run_id = run_id_of(starter)
        server.kill()
        lost = await wait_until(lambda: "lost the Temporal server" in starter.stderr(), 10, "the lost-server line")
        code = await starter.wait(40)
        assert code == 3, starter.describe()
        assert 7 < time.monotonic() - lost < 20, starter.describe()
        assert "retrying for 8 s" in starter.stderr(), starter.describe()
        (line,) = stderr_lines(starter)
        assert f"lost the Temporal server at {server.address}" in line, line
        assert f"python starter.py attach {run_id}" in line, line
        assert_no_noise(starter)
    finally:
        await starter.stop()


async def test_server_back_in_time_and_the_run_goes_on(own_server, fake_llm, tmp_path):
    # The think in flight outlives the outage when its heartbeats get through
    # again in time, else it is retried; either way the run finishes.
    fake_llm.turns = [[Reply(content="slowly", tool_calls=python("print(17*23)").tool_calls, delay=8),
                       python("print(17*23)")], terminate(ANSWER)]
    server = await own_server()
    starter = start_starter([TASK], own_env(tmp_path, server, fake_llm), tmp_path / "logs")
    try:
        await fake_llm.await_requests(1, timeout=30)
        server.kill()
        await wait_until(lambda: "lost the Temporal server" in starter.stderr(), 10, "the lost-server line")
        await server.start()  # the same database and port
        finished(starter, await starter.wait(60))
        assert "reconnected to the Temporal server" in starter.stdout(), starter.describe()
        assert len(stderr_lines(starter)) == 1, starter.describe()
        assert_no_noise(starter)
    finally:
        await starter.stop()


async def test_a_run_the_server_ends_at_its_history_limit(own_server, fake_llm, tmp_path):
    fake_llm.turns = [python(f"print({i})") for i in range(12)] + [terminate(ANSWER)]
    server = await own_server("--dynamic-config-value", "limit.historyCount.error=40")
    starter = start_starter([TASK], own_env(tmp_path, server, fake_llm), tmp_path / "logs")
    try:
        code = await starter.wait(COMMAND_BOUND)
        assert code == 1, starter.describe()
        (line,) = stderr_lines(starter)
        assert "was terminated by the Temporal server: Workflow history count exceeds limit." in line, line
        assert "limit.historyCount.error" in line, line
        assert_no_noise(starter)
    finally:
        await starter.stop()
