"""Shared pieces of the benchmarks: the server, the fake LLM, settings, timing."""

from __future__ import annotations

import asyncio
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from temporalio.client import Client, WorkflowHandle
from temporalio.contrib.pydantic import pydantic_data_converter

from agent_model.continuation import current_limits
from agent_model.profiles import MANUS, AgentProfile
from agent_model.run import AgentRunInput, AgentRunResult
from bench.fake_llm import directive_text
from config.settings import LLMSettings, Settings
from runtime.embedded_server import start_dev_server_command, temporal_cli
from tools import with_tool_terms
from workflows import search_attributes
from workflows.agent import AgentWorkflow

REPO_DIR = Path(__file__).resolve().parent.parent
SERVER_START_SECONDS = 60.0
"""Longest wait for the dev server to answer."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# ---- processes ------------------------------------------------------------------


def _stop_group(process: subprocess.Popen, timeout: float = 10.0) -> None:
    """SIGTERM the child's process group (it leads one), then SIGKILL."""
    if process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


class DevServer:
    """`temporal server start-dev` exactly as the embedded server runs it (SQLite
    file, WAL pragmas, search attributes), on free ports, in a scratch dir."""

    def __init__(self, directory: Path, extra_args: Sequence[str] = ()) -> None:
        """extra_args: more `temporal server start-dev` flags, appended to the command."""
        self.directory = directory
        self.port = free_port()
        self.ui_port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None
        self.command = [*start_dev_server_command(directory / "temporal.db", self.port, self.ui_port), *extra_args]

    async def start(self) -> Client:
        self.directory.mkdir(parents=True, exist_ok=True)
        with open(self.directory / "temporal.log", "wb") as out:
            self.process = subprocess.Popen(
                self.command,
                cwd=self.directory,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + SERVER_START_SECONDS
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"the dev server exited: see {self.directory / 'temporal.log'}")
            try:
                return await connect(self.address)
            except RuntimeError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.25)

    def stop(self) -> None:
        if self.process is not None:
            _stop_group(self.process)
            self.process = None


async def connect(address: str) -> Client:
    return await Client.connect(address, data_converter=pydantic_data_converter)


class FakeLLMProcess:
    """bench/fake_llm.py in a child process; base_url once started."""

    def __init__(self, max_seconds: float = 3600.0) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bench.fake_llm", "--max-seconds", str(max_seconds)],
            cwd=REPO_DIR,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            start_new_session=True,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline().decode().split()
        if len(line) != 2 or line[0] != "PORT":
            _stop_group(self.process)
            raise RuntimeError(f"the fake LLM did not start (said {line!r})")
        self.port = int(line[1])
        self.base_url = f"http://127.0.0.1:{self.port}/v1"

    async def stats(self) -> list[dict]:
        import json

        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        try:
            writer.write(b"GET /stats HTTP/1.1\r\nHost: fake\r\nConnection: close\r\n\r\n")
            await writer.drain()
            data = await reader.read()
        finally:
            writer.close()
        return json.loads(data.split(b"\r\n\r\n", 1)[1])

    def stop(self) -> None:
        _stop_group(self.process, timeout=5)


# ---- the agent under test ----------------------------------------------------------


def bench_settings(base_url: str, workspace_root: Path, task_queue: str | None = None) -> Settings:
    return Settings(
        llm={"default": LLMSettings(model="gpt-4o", base_url=base_url, api_key="bench-key")},
        workspace_root=workspace_root,
        task_queue=task_queue or f"bench-{uuid.uuid4().hex[:8]}",
    )


def bench_profile(max_steps: int, tools: list[str], max_observe: int | None = 10000) -> AgentProfile:
    """The manus profile (its system and next-step prompts, memory window and
    observation clip), with the benchmark's tool and step count."""
    return MANUS.model_copy(
        update=dict(name="bench", tools=[*tools, "terminate"], max_steps=max_steps, max_observe=max_observe)
    )


def task_for(script: dict) -> str:
    return f"Benchmark run. Follow the script. {directive_text(script)}"


def new_run_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


async def start_agent(
    client: Client,
    settings: Settings,
    profile: AgentProfile,
    script: dict,
    run_id: str | None = None,
    local_reads: bool = True,
) -> WorkflowHandle[Any, AgentRunResult]:
    """As the starter starts a run: the tools' terms and this code's limits in
    its input (runtime/run_start.py agent_run_input), their workflow task timeout.
    local_reads=False: every call an activity, as in an input written before the rule."""
    run_id = run_id or new_run_id("bench")
    script = {**script, "run": run_id}
    limits = current_limits()
    termed = with_tool_terms(profile)
    if not local_reads:
        termed = termed.model_copy(update={
            "tool_terms": {name: t.model_copy(update={"local_reads": {}}) for name, t in termed.tool_terms.items()}
        })
    return await client.start_workflow(
        AgentWorkflow.run,
        AgentRunInput(task=task_for(script), profile=termed, continuation=limits),
        id=run_id,
        task_queue=settings.task_queue,
        task_timeout=limits.workflow_task_timeout(),
        # As the starter does when the server has them (the embedded one does).
        search_attributes=search_attributes.initial(profile.name),
        static_summary="benchmark run",
    )


def check_result(result: AgentRunResult, steps: int, what: str) -> None:
    if result.steps_taken != steps or any(c.error for s in result.steps for c in s.tool_calls):
        errors = [c.observation[:200] for s in result.steps for c in s.tool_calls if c.error]
        raise RuntimeError(
            f"{what}: expected {steps} clean steps, got {result.steps_taken} "
            f"({result.state.value}/{result.stop_reason.value}, note {result.note!r}, errors {errors[:3]})"
        )


# ---- numbers -----------------------------------------------------------------------


@dataclass
class Samples:
    values: list[float] = field(default_factory=list)

    def add(self, value: float) -> None:
        self.values.append(value)

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    def spread(self, scale: float = 1.0, fmt: str = "{:.1f}") -> str:
        """'median (min-max, n=k)'."""
        if len(self.values) == 1:
            return fmt.format(self.values[0] * scale)
        lo, hi = min(self.values) * scale, max(self.values) * scale
        return f"{fmt.format(self.median * scale)} ({fmt.format(lo)}-{fmt.format(hi)}, n={len(self.values)})"


def verdict(value: float, target: float) -> str:
    return "met" if value <= target else "MISSED"


def machine_info() -> dict[str, str]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = "unknown"
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                mem = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
                break
    except OSError:
        pass
    from importlib.metadata import version

    def v(name: str) -> str:
        try:
            return version(name)
        except Exception:
            return "?"

    temporal = subprocess.run([temporal_cli(), "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
    return {
        "cpus (nproc)": str(os.cpu_count()),
        "cpu model": cpu,
        "memory": mem,
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "temporalio": v("temporalio"),
        "openai": v("openai"),
        "pydantic": v("pydantic"),
        "temporal CLI": temporal,
        "load average at start": " ".join(f"{x:.2f}" for x in os.getloadavg()),
    }


def current_rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def peak_rss_mib() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds used so far by process pid (its threads included)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class CpuMeter:
    """CPU seconds used by the dev server, this process and the fake LLM between
    start() and stop()."""

    def __init__(self, **pids: int) -> None:
        self.pids = pids
        self.used: dict[str, float] = {}

    def start(self) -> "CpuMeter":
        self._before = {name: cpu_seconds(pid) for name, pid in self.pids.items()}
        return self

    def stop(self) -> "CpuMeter":
        self.used = {name: cpu_seconds(pid) - self._before[name] for name, pid in self.pids.items()}
        return self


def history_breakdown(history) -> dict[str, float]:
    """Median milliseconds, from the server's event times, of: a workflow task
    waiting to be picked up (scheduled -> started), a workflow task on the
    worker (started -> completed), and each activity type (scheduled ->
    completed: queueing, running and reporting back)."""
    from temporalio.api.enums.v1 import EventType

    def at(event) -> float:
        return event.event_time.ToNanoseconds() / 1e6

    spans: dict[str, list[float]] = {}
    scheduled: dict[int, tuple[str, float]] = {}
    wft_scheduled = wft_started = None
    for event in history.events:
        kind = event.event_type
        if kind == EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED:
            wft_scheduled = at(event)
        elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED and wft_scheduled is not None:
            wft_started = at(event)
            spans.setdefault("workflow task: wait", []).append(wft_started - wft_scheduled)
        elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED and wft_started is not None:
            spans.setdefault("workflow task: on the worker", []).append(at(event) - wft_started)
        elif event.HasField("activity_task_scheduled_event_attributes"):
            name = event.activity_task_scheduled_event_attributes.activity_type.name
            scheduled[event.event_id] = (name, at(event))
        elif event.HasField("activity_task_completed_event_attributes"):
            name, began = scheduled[event.activity_task_completed_event_attributes.scheduled_event_id]
            spans.setdefault(f"activity {name}", []).append(at(event) - began)
    return {name: statistics.median(values) for name, values in spans.items()}


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f}"

