"""End-to-end helpers for the tests, the crash driver and the benchmarks:
worker.py / starter.py as child processes pointed at a dev server and at the
fake LLM, and small probes of a run's Temporal state and of live processes.

Every child runs in its own session (so it leads its own process group, and
killing the group takes everything it started), writes its output to files
under the test's tmp_path (no pipe can fill up and stall it), and gets an
environment built for the test: no config file, no Temporal profile from the
real home directory, no inherited OPENAI_* / TEMPORAL_* variables.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Awaitable, Callable, Mapping, Sequence

from temporalio.api.enums.v1 import EventType, PendingActivityState
from temporalio.client import WorkflowHandle

from agent_model.run import AgentRunInput, AgentRunResult
from config.settings import DEFAULT_CONFIG_PATH
from testkit.run_results import final_result
from workflows.agent import AgentWorkflow

REPO_DIR = Path(__file__).resolve().parent.parent
WORKER_SCRIPT = REPO_DIR / "worker.py"
STARTER_SCRIPT = REPO_DIR / "starter.py"

_STRIPPED_PREFIXES = ("TEMPORAL_", "OPENAI_", "DURABLE_MANUS_", "TIKTOKEN_")
_STRIPPED_NAMES = {"WORKSPACE_ROOT", "XDG_CONFIG_HOME", "PYTHONPATH"}


def run_cli(
    *args: str | bytes, env_extra: Mapping[str, str | None] | None = None, script: str = "starter.py"
) -> subprocess.CompletedProcess:
    """`script` (starter.py by default) run to its end with `args`, its output
    captured: no inherited OPENAI_* / TEMPORAL_* / DURABLE_MANUS_* variables,
    an unreachable TEMPORAL_ADDRESS, OPENAI_API_KEY=sk-test; `env_extra` is
    applied last, a None value removing the variable."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "TEMPORAL_", "DURABLE_MANUS_"))}
    env.update({"TEMPORAL_ADDRESS": "127.0.0.1:9", "OPENAI_API_KEY": "sk-test"})
    env.update(env_extra or {})
    env = {k: v for k, v in env.items() if v is not None}
    return subprocess.run(
        [sys.executable, script, *args], cwd=REPO_DIR, env=env, capture_output=True, text=True, timeout=60
    )


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_address(env) -> str:
    """host:port of a started WorkflowEnvironment."""
    return env.client.service_client.config.target_host


def unique_queue(prefix: str = "e2e") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def child_env(
    tmp_path: Path,
    *,
    address: str,
    task_queue: str,
    base_url: str,
    workspace_root: Path | None = None,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Environment for worker.py / starter.py.

    HOME, XDG_CONFIG_HOME and TMPDIR point into tmp_path, so neither a
    Temporal config profile of the real user is read nor anything is written
    outside tmp_path. DURABLE_MANUS_CONFIG stays unset (environment-only
    configuration) unless the repo happens to hold a gitignored
    config/config.toml, which would otherwise be merged in: then an empty
    config file is named instead, with the same effect as its absence.
    `extra` is applied last and overrides any of the above.
    """
    home = tmp_path / "home"
    scratch = tmp_path / "tmp"
    for d in (home, scratch, home / ".config"):
        d.mkdir(parents=True, exist_ok=True)
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(_STRIPPED_PREFIXES) and k not in _STRIPPED_NAMES
    }
    env.update(
        HOME=str(home),
        XDG_CONFIG_HOME=str(home / ".config"),
        TMPDIR=str(scratch),
        PYTHONUNBUFFERED="1",
        PYTHONDONTWRITEBYTECODE="1",
        TEMPORAL_ADDRESS=address,
        TEMPORAL_NAMESPACE="default",
        TEMPORAL_TASK_QUEUE=task_queue,
        OPENAI_API_KEY="test-key",
        OPENAI_BASE_URL=base_url,
        WORKSPACE_ROOT=str(workspace_root or tmp_path / "workspace"),
        # The starter builds Web UI links from this; keep it off the real 8233.
        TEMPORAL_UI_URL="http://127.0.0.1:1",
        # Tests count executions in files outside the run directory, which the
        # sandbox would hide; tests/test_sandbox.py runs with it.
        DURABLE_MANUS_TOOL_SANDBOX="none",
        # A listed worker takes a run in well under a second, but not always
        # within the product's 3 s on a loaded machine.
        DURABLE_MANUS_PICKUP_WAIT="30",
        # The worker a starter starts outlives it (runtime/detached_worker.py):
        # its pid file and log go under tmp_path, and it exits soon after the
        # test's runs end.
        DURABLE_MANUS_DATA_DIR=str(tmp_path / "data"),
        DURABLE_MANUS_WORKER_IDLE_EXIT="10",
    )
    if DEFAULT_CONFIG_PATH.exists():
        empty = tmp_path / "empty-config.toml"
        empty.write_text("", encoding="utf-8")
        env["DURABLE_MANUS_CONFIG"] = str(empty)
    env.update(extra or {})
    return env


class Child:
    """A python child process (worker.py or starter.py) in its own session."""

    def __init__(
        self, name: str, argv: list[str], env: Mapping[str, str], log_dir: Path, prefix: Sequence[str] = ()
    ) -> None:
        """`prefix`: a command that runs python in its place (e.g. `ip netns exec NS`), which must exec
        it, so that the pid is python's."""
        self.name = name
        log_dir.mkdir(parents=True, exist_ok=True)
        stamp = uuid.uuid4().hex[:6]
        self.stdout_path = log_dir / f"{name}-{stamp}.out"
        self.stderr_path = log_dir / f"{name}-{stamp}.err"
        self.started_at = time.monotonic()
        with open(self.stdout_path, "wb") as out, open(self.stderr_path, "wb") as err:
            self.process = subprocess.Popen(
                [*prefix, sys.executable, *argv],
                cwd=REPO_DIR,
                env=dict(env),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
            )

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def returncode(self) -> int | None:
        return self.process.poll()

    def stdout(self) -> str:
        return self.stdout_path.read_text(encoding="utf-8", errors="replace")

    def stderr(self) -> str:
        return self.stderr_path.read_text(encoding="utf-8", errors="replace")

    def describe(self) -> str:
        """Both outputs, for assertion messages."""
        return (
            f"--- {self.name} (pid {self.pid}, exit {self.returncode}) stdout ---\n{self.stdout()}"
            f"--- {self.name} stderr ---\n{self.stderr()[-6000:]}"
        )

    async def wait(self, timeout: float) -> int:
        """Exit code; raises TimeoutError (with the child's output) if it runs longer."""
        deadline = time.monotonic() + timeout
        while self.process.poll() is None:
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{self.name} still running after {timeout} s\n{self.describe()}")
            await asyncio.sleep(0.05)
        return self.process.returncode

    def signal_group(self, sig: int) -> None:
        try:
            os.killpg(self.process.pid, sig)
        except ProcessLookupError:
            pass

    def kill(self) -> None:
        """SIGKILL the whole process group and reap the child."""
        self.signal_group(signal.SIGKILL)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass

    async def stop(self, timeout: float = 15) -> int | None:
        """SIGTERM (graceful shutdown), then SIGKILL if it does not end in time."""
        if self.process.poll() is None:
            self.signal_group(signal.SIGTERM)
            try:
                await self.wait(timeout)
            except TimeoutError:
                pass
        # Anything left in the group (normally nothing) goes too.
        self.kill()
        return self.process.returncode


def start_worker(env: Mapping[str, str], log_dir: Path, name: str = "worker", prefix: Sequence[str] = ()) -> Child:
    return Child(name, [str(WORKER_SCRIPT), "--connect-timeout", "20"], env, log_dir, prefix)


def start_starter(args: list[str], env: Mapping[str, str], log_dir: Path, name: str = "starter") -> Child:
    return Child(name, [str(STARTER_SCRIPT), *args], env, log_dir)


async def wait_until(
    predicate: Callable[[], bool | Awaitable[bool]], timeout: float, what: str, interval: float = 0.05
) -> float:
    """Poll until predicate() is true; returns the monotonic time it became true."""
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if asyncio.iscoroutine(result) or isinstance(result, Awaitable):
            result = await result
        if result:
            return time.monotonic()
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(interval)


async def wait_for_activity_start(handle: WorkflowHandle, activity_type: str, timeout: float = 30) -> None:
    """Poll the run until an activity of `activity_type` has been taken by a worker."""

    async def started() -> bool:
        pending = (await handle.describe()).raw_description.pending_activities
        return any(
            p.activity_type.name == activity_type and p.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
            for p in pending
        )

    await wait_until(started, timeout, f"a {activity_type} activity to start")


def kill_tool_process(pid: int) -> bool:
    """SIGKILL the group led by pid, a python_execute child (it leads its own
    session), if it is still that program. Returns True if it was killed."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    if cmdline[1:5] != [b"-E", b"-s", b"-u", b"-"] or not pid_alive(pid):
        return False
    try:
        os.killpg(pid, signal.SIGKILL)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def pid_alive(pid: int) -> bool:
    """True if pid exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError, ProcessLookupError):
        return False
    return state != "Z"


def lines_of(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


def completed_turns(fake, turn: int) -> list:
    return [r for r in fake.completed() if r.turn == turn]


def requests_for_turn(fake, turn: int) -> list:
    return [r for r in list(fake.requests) if r.turn == turn]


async def pending_activity(handle, activity_type: str):
    """The run's pending activity of that type (PendingActivityInfo), or None."""
    description = await handle.describe()
    for pending in description.raw_description.pending_activities:
        if pending.activity_type.name == activity_type:
            return pending
    return None


async def has_heartbeated(handle, activity_type: str) -> bool:
    pending = await pending_activity(handle, activity_type)
    return pending is not None and pending.HasField("last_heartbeat_time")


async def activity_attempts(handle) -> list[tuple[str, int, str | None]]:
    """(activity type, attempt that completed it, timeout type of the attempt
    before it or None) for every activity that started, in history order.
    With retries the server writes one ActivityTaskStarted per activity: that
    of the last attempt, carrying the previous attempt's failure."""
    from temporalio.api.enums.v1 import TimeoutType

    history = await handle.fetch_history()
    scheduled = {
        e.event_id: e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
    }
    attempts = []
    for e in history.events:
        if not e.HasField("activity_task_started_event_attributes"):
            continue
        started = e.activity_task_started_event_attributes
        timeout = None
        if started.HasField("last_failure") and started.last_failure.HasField("timeout_failure_info"):
            timeout = TimeoutType.Name(started.last_failure.timeout_failure_info.timeout_type)
        attempts.append((scheduled[started.scheduled_event_id], started.attempt, timeout))
    return attempts


async def run_on_a_worker(
    dev_env,
    tmp_path: Path,
    base_url: str,
    task: str,
    while_running: Callable[[], Awaitable[None]] | None = None,
    **env_extra: str,
) -> AgentRunResult:
    """One manus run on a worker.py of its own, with the real tool sandbox;
    `while_running` is awaited after the run ends, before the worker stops."""
    queue = unique_queue("own-worker")
    env = child_env(tmp_path, address=server_address(dev_env), task_queue=queue, base_url=base_url)
    env.update(DURABLE_MANUS_TOOL_SANDBOX="auto", **env_extra)
    worker = start_worker(env, tmp_path / "logs")
    try:
        handle = await dev_env.client.start_workflow(
            AgentWorkflow.run,
            AgentRunInput(task=task, agent="manus"),
            id=f"own-{uuid.uuid4().hex[:8]}",
            task_queue=queue,
            result_type=AgentRunResult,
        )
        result = await final_result(handle)
        if while_running is not None:
            await while_running()
        return result
    finally:
        await worker.stop()


_STAT_FIELDS = {"pgrp": 2, "session": 3}
"""Positions in /proc/<pid>/stat after the parenthesised command name (state is 0)."""


def live_processes(field: str, value: int) -> list[int]:
    """Pids of the processes (zombies excepted) whose process group ("pgrp") or
    session ("session") is `value`."""
    alive = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[_STAT_FIELDS[field]]) == value and fields[0] != "Z":
            alive.append(int(entry.name))
    return alive


_ACTIVITY_CLOSED = {
    EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED,
    EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED,
    EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT,
    EventType.EVENT_TYPE_ACTIVITY_TASK_CANCELED,
}


def closed_before_the_run(history, activity_type: str) -> bool:
    """Whether every `activity_type` activity of the history reported its end
    (completed, failed, timed out or cancelled) before the run closed: with
    TRY_CANCEL a cancelled run closes while its activity still runs, and that
    activity's end is never recorded."""
    scheduled, closed = set(), set()
    for event in history.events:
        if event.HasField("activity_task_scheduled_event_attributes"):
            if event.activity_task_scheduled_event_attributes.activity_type.name == activity_type:
                scheduled.add(event.event_id)
        elif event.event_type in _ACTIVITY_CLOSED:
            attributes = next(
                getattr(event, field)
                for field in (
                    "activity_task_completed_event_attributes",
                    "activity_task_failed_event_attributes",
                    "activity_task_timed_out_event_attributes",
                    "activity_task_canceled_event_attributes",
                )
                if event.HasField(field)
            )
            closed.add(attributes.scheduled_event_id)
    return bool(scheduled) and scheduled <= closed
