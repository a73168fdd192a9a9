"""A worker that cannot reach its Temporal server stops its tool calls on its
own (activities/server_contact.py): their results could not arrive, and the
server retries them elsewhere. The server is frozen with SIGSTOP (it answers
nothing, as behind a dark link); a dev server of the test's own."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import time
import uuid

import pytest

from activities.server_contact import LOST_AFTER
from activities.tools.process import LEASE_SECONDS
from activities.tools.sandbox import ToolSandbox
from agent_model.run import AgentRunInput
from bench.common import DevServer
from runtime.worker_factory import build_worker
from testkit.fake_openai import python, terminate
from testkit.settings import make_settings
from tests.test_sandbox import require
from workflows.agent import AgentWorkflow

pytestmark = pytest.mark.e2e

STOPPED_WITHIN = LOST_AFTER + LEASE_SECONDS + 1.5
"""No answer for LOST_AFTER, then the guard's lease lapses; plus a beat's interval and the kill."""


def sleeping(mark: str) -> bool:
    return subprocess.run(["pgrep", "-f", f"sleep 300[.]{mark}"], capture_output=True).stdout != b""


async def wait_for(check, seconds: float, what: str) -> float:
    began = time.monotonic()
    while not check():
        if time.monotonic() - began > seconds:
            raise AssertionError(f"{what}: not within {seconds} s")
        await asyncio.sleep(0.05)
    return time.monotonic() - began


async def test_a_worker_that_loses_its_server_stops_its_tool_calls_and_says_so(tmp_path, fake_llm, caplog):
    caplog.set_level(logging.WARNING, logger="activities.server_contact")
    settings = make_settings(fake_llm.base_url, tmp_path / "workspace", tool_sandbox="auto")
    require(ToolSandbox.detect("auto", settings.workspace_root).mode == "bwrap", "bubblewrap")
    mark = str(uuid.uuid4().int % 10**8)
    fake_llm.turns = [python(f"import subprocess\nsubprocess.run(['sleep', '300.{mark}'])"), terminate("done")]
    server = DevServer(tmp_path / "server")
    client = await server.start()
    assert server.process is not None
    frozen = False
    try:
        async with build_worker(client, settings):
            handle = await client.start_workflow(
                AgentWorkflow.run, AgentRunInput(task="sleep", agent="manus"), id=f"contact-{mark}",
                task_queue=settings.task_queue,
            )
            await wait_for(lambda: sleeping(mark), 60, "the tool call to start")
            await asyncio.sleep(1.5)  # a heartbeat or two: the call is well under way
            os.killpg(server.process.pid, signal.SIGSTOP)
            frozen = True
            stopped_after = await wait_for(lambda: not sleeping(mark), 30, "the call to be stopped")
            assert "no answer from the Temporal server" in caplog.text
            os.killpg(server.process.pid, signal.SIGCONT)
            frozen = False
            await wait_for(lambda: "answers again" in caplog.text, 15, "the worker to see its server again")
            await handle.terminate("the test is over")
    finally:
        if frozen:
            os.killpg(server.process.pid, signal.SIGCONT)
        server.stop()
    print(f"\n[server frozen] the tool call stopped {stopped_after:.1f} s later")
    assert stopped_after < STOPPED_WITHIN, f"stopped after {stopped_after:.1f} s"
    lines = [r.getMessage() for r in caplog.records if r.name == "activities.server_contact"]
    assert len(lines) == 2, lines  # one line each way
