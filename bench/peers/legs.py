"""The four kinds of run compare.py interleaves. Each leg's run(steps) does
one run of `steps` editor steps and returns what it cost (a Sample):

- durable-manus: AgentWorkflow on a worker in this process, the manus
  profile with one tool, str_replace_editor, whose `view` reads a 5-line file
  (a local activity: a call that only reads runs in the workflow task);
- bare: bench/bare.py's loop in this process, prepare + 2 echo activities a step;
- a peer: its agent program (agents_sdk_agent.py, pydantic_ai_agent.py) in its
  own venv's python, one process for the whole benchmark, a run per request.

Every agent follows the same script of the fake LLM: `steps` turns that each
call the editor once, then a plain final answer (steps + 1 model calls).
Worker CPU is the process's own user + system time over the run: for the two
legs in this process, this process (its worker, the client, and the other
worker idling); for a peer, its program (worker and client).
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import signal
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from temporalio.client import Client, WorkflowHandle

from agent_model.run import AgentState
from agent_model.workspace_names import workspace_name_for
from bench.bare import BareLoopWorkflow
from bench.common import REPO_DIR, bench_profile, new_run_id, start_agent, task_for
from bench.peers.setup import Peer
from config.settings import Settings
from testkit.run_results import final_result

TOOL = "str_replace_editor"
VIEW_ARGS = {"command": "view", "path": "notes.txt"}
NOTES_TEXT = "".join(f"line {i}: a small file for the benchmark's view calls\n" for i in range(1, 6))
READY_SECONDS = 180.0
"""Longest wait for a peer program's worker: its imports take seconds, more on a loaded machine."""
RUN_SECONDS = 300.0
"""Longest a peer's run may take: a 50-step run takes seconds; minutes means it is stuck."""


@dataclass
class Sample:
    steps: int
    wall: float
    cpu: float
    events: int
    bytes: int


def script(steps: int, run_id: str) -> dict:
    return {"tool": TOOL, "args": VIEW_ARGS, "turns": steps, "run": run_id}


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _history_size(handle: WorkflowHandle) -> tuple[int, int]:
    history = await handle.fetch_history()
    return len(history.events), sum(event.ByteSize() for event in history.events)


class DurableManusLeg:
    name = "durable-manus"
    title = "durable-manus"

    def __init__(self, client: Client, settings: Settings) -> None:
        self.client = client
        self.settings = settings

    async def run(self, steps: int) -> Sample:
        run_id = new_run_id("bench-peers-dm")
        directory = self.settings.workspace_root / workspace_name_for(run_id)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "notes.txt").write_text(NOTES_TEXT)
        cpu_before, began = cpu_seconds(), time.perf_counter()
        # steps + 1: the last step is the think whose plain answer ends the run.
        handle = await start_agent(
            self.client, self.settings, bench_profile(steps + 1, [TOOL]), script(steps, run_id), run_id=run_id
        )
        result = await final_result(handle)
        wall, cpu = time.perf_counter() - began, cpu_seconds() - cpu_before
        calls = [call for step in result.steps for call in step.tool_calls]
        if result.state != AgentState.FINISHED or len(calls) != steps or any(call.error for call in calls):
            raise RuntimeError(
                f"durable-manus run {run_id}: expected {steps} clean editor calls and an answer, got "
                f"{len(calls)} calls, {result.state.value}/{result.stop_reason.value}, note {result.note!r}"
            )
        return Sample(steps, wall, cpu, *await _history_size(handle))


class BareLeg:
    name = "bare"
    title = "bare Temporal loop"

    def __init__(self, client: Client, task_queue: str) -> None:
        self.client = client
        self.task_queue = task_queue

    async def run(self, steps: int) -> Sample:
        cpu_before, began = cpu_seconds(), time.perf_counter()
        handle = await self.client.start_workflow(
            BareLoopWorkflow.run, steps, id=new_run_id("bench-peers-bare"), task_queue=self.task_queue
        )
        if await handle.result() != steps:
            raise RuntimeError("the bare loop returned another step count")
        wall, cpu = time.perf_counter() - began, cpu_seconds() - cpu_before
        return Sample(steps, wall, cpu, *await _history_size(handle))


class PeerUnavailable(RuntimeError):
    """A peer program that would not start or answer; the message is one line."""


class PeerLeg:
    """A peer's agent program, running for as long as the benchmark."""

    def __init__(self, peer: Peer, python: Path, log_path: Path) -> None:
        self.peer = peer
        self.python = python
        self.log_path = log_path
        self.name = peer.name
        self.title = peer.title
        self.process: asyncio.subprocess.Process | None = None

    async def start(self, server_address: str, base_url: str) -> "PeerLeg":
        # The peers get no key of the user's: their clients carry the fake's.
        env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
        with open(self.log_path, "wb") as log:
            self.process = await asyncio.create_subprocess_exec(
                str(self.python), str(REPO_DIR / "bench" / "peers" / self.peer.program),
                "--server", server_address, "--base-url", base_url,
                "--task-queue", f"bench-{self.name}-{uuid.uuid4().hex[:8]}",
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=log,
                cwd=REPO_DIR, env=env, start_new_session=True,
            )
        line = await self._line(READY_SECONDS, "start")
        if line != "READY":
            raise PeerUnavailable(f"{self.name}: its program said {line[:200]!r} instead of READY")
        return self

    async def _line(self, timeout: float, what: str) -> str:
        assert self.process is not None and self.process.stdout is not None
        try:
            raw = await asyncio.wait_for(self.process.stdout.readline(), timeout)
        except asyncio.TimeoutError:
            raise PeerUnavailable(f"{self.name}: no answer to {what} in {timeout:.0f} s") from None
        if not raw:
            raise PeerUnavailable(f"{self.name}: its program exited during {what}: {self._last_log_line()}")
        return raw.decode(errors="replace").strip()

    def _last_log_line(self) -> str:
        try:
            lines = [line for line in self.log_path.read_text(errors="replace").splitlines() if line.strip()]
        except OSError:
            return "no log"
        return lines[-1][:300] if lines else "nothing on stderr"

    async def run(self, steps: int) -> Sample:
        assert self.process is not None and self.process.stdin is not None
        run_id = new_run_id(f"bench-peers-{self.name}")
        request = {"run_id": run_id, "task": task_for(script(steps, run_id)), "steps": steps}
        self.process.stdin.write((json.dumps(request) + "\n").encode())
        await self.process.stdin.drain()
        report = json.loads(await self._line(RUN_SECONDS, f"a {steps}-step run"))
        if "error" in report:
            raise PeerUnavailable(f"{self.name}: run {run_id} failed: {report['error']}")
        tool_calls = sum(n for kind, n in report["activities"].items() if TOOL in kind or "call_tool" in kind)
        if tool_calls != steps:
            raise PeerUnavailable(f"{self.name}: run {run_id} made {tool_calls} tool calls, not {steps}")
        return Sample(steps, report["wall"], report["cpu"], report["events"], report["bytes"])

    async def stop(self) -> None:
        if self.process is None or self.process.returncode is not None:
            return
        assert self.process.stdin is not None
        self.process.stdin.close()  # the program's loop ends with its stdin
        try:
            await asyncio.wait_for(self.process.wait(), 20)
        except asyncio.TimeoutError:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            await self.process.wait()
