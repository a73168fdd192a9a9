"""P4 resume: how long a run stalls when its worker is SIGKILLed mid-call, and
what the heartbeats that notice it cost.

worker.py runs as a child process (own session, environment-only config, as a
user would start it) against a dev server of P4's own, started with
`--metrics-port` so that its Prometheus counters can be read. Two scenarios,
each a 5-step run whose third step is interrupted:

    think  str_replace_editor `view` per step; the first attempt of the third
           think is answered only after 60 s, its retry at once
    bash   one bash command per step; its third run (a counter file in the run
           directory) sleeps 60 s, the retry finds the counter moved on

The worker's process group is SIGKILLed just after the slow call's first
heartbeat reached the server: the server's heartbeat timer then runs its full
length, and the dead worker's sticky queue was polled moments ago (the server
keeps routing the run's workflow tasks there for 10 s after its last poll),
the worst moment on both counts. A new worker.py starts at once. From the
run's history and the server's poller list (server timestamps):

    kill -> run moves on       SIGKILL to the run's next activity being scheduled
                               (the step's tool call, or the next step's think)
    first poll -> run moves on the new worker's first poll to the same event
    kill -> retry started      SIGKILL to the start of the interrupted call's retry
    retry done -> workflow task started
                               from the retried call's completion to the start of the
                               workflow task that handles it (a task sent to the dead
                               worker's sticky queue would wait ~10 s here; the retry
                               clears the run's sticky queue: activities/lost_worker.py)
    new worker polling         Popen to the new worker's first poll

Expected: one heartbeat timeout (4 s: activities/llm.py THINK_OPTIONS,
activities/tools/process.py TOOL_HEARTBEAT_TIMEOUT) plus the first retry
interval (1 s) plus ~0.1 s after the kill; ~1 s less after the new worker's
first poll (it polls ~1 s after it starts).

Heartbeat cost: one worker runs one slow think, then one slow bash call, then
CONCURRENT slow thinks, each for RATE_WINDOW seconds, while P4 reads the
server's counters of RecordActivityTaskHeartbeat RPCs and of the history
service's UpdateWorkflowExecution writes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from datetime import timedelta

from temporalio.api.enums.v1 import TaskQueueType, TimeoutType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest

from activities.llm import THINK_OPTIONS
from tools import bash
from agent_model.workspace_names import workspace_name_for
from testkit.run_results import final_result
from bench.common import (
    REPO_DIR,
    DevServer,
    Samples,
    _stop_group,
    bench_profile,
    bench_settings,
    check_result,
    free_port,
    log,
    new_run_id,
    start_agent,
)
from bench.context import Context, Section
from config.settings import DEFAULT_CONFIG_PATH
from testkit.e2e import pending_activity

STEPS = 5
SLOW_STEP = 2  # 0-based: the third step
SLOW_DELAY = 60.0
RUN_TIMEOUT = 120.0
RATE_WINDOW = 5.0
CONCURRENT = 10
TARGET = 5.0
"""Seconds from the new worker's first poll until the run moves on (issue 11)."""

EDITOR = "str_replace_editor"
NOTES = "notes.txt"
COUNTER = ".p4-count"
SLOW_BASH = (
    f"n=$(cat {COUNTER} 2>/dev/null || echo 0); echo $((n + 1)) > {COUNTER}; "
    f"if [ \"$n\" = {SLOW_STEP} ]; then sleep {SLOW_DELAY:g}; fi; echo step $n"
)


def _seconds(value: timedelta) -> float:
    return value.total_seconds()


@dataclasses.dataclass(frozen=True)
class Scenario:
    name: str
    interrupted: str
    """The activity type killed in flight."""
    tool: str
    args: dict
    options: dict
    """The interrupted activity's options (heartbeat timeout, retry policy)."""

    @property
    def expected_seconds(self) -> float:
        """Heartbeat timeout + first retry interval: the wait after a worst-moment kill."""
        policy = self.options["retry_policy"]
        return _seconds(self.options["heartbeat_timeout"]) + _seconds(policy.initial_interval)

    def script(self, run_id: str) -> dict:
        script = {"tool": self.tool, "args": self.args, "run": run_id}
        if self.interrupted == "think":
            script.update(slow_turn=SLOW_STEP, slow_delay=SLOW_DELAY)
        return script


SCENARIOS = [
    Scenario("think", "think", EDITOR, {"command": "view", "path": NOTES}, THINK_OPTIONS),
    Scenario("bash", bash.NAME, bash.NAME, {"command": SLOW_BASH}, bash.CONFIG),
]


class WorkerProcess:
    """worker.py in its own session; output to files in the scratch dir."""

    def __init__(self, ctx: Context, queue: str, root, name: str) -> None:
        home = ctx.scratch / "p4-home"
        (home / ".config").mkdir(parents=True, exist_ok=True)
        (ctx.scratch / "p4-tmp").mkdir(exist_ok=True)
        env = {
            k: v for k, v in os.environ.items()
            if not k.startswith(("TEMPORAL_", "OPENAI_", "DURABLE_MANUS_", "TIKTOKEN_"))
            and k not in ("WORKSPACE_ROOT", "XDG_CONFIG_HOME", "PYTHONPATH")
        }
        env.update(
            HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"), TMPDIR=str(ctx.scratch / "p4-tmp"),
            PYTHONUNBUFFERED="1", TEMPORAL_ADDRESS=ctx.server.address, TEMPORAL_NAMESPACE="default",
            TEMPORAL_TASK_QUEUE=queue, OPENAI_API_KEY="x", OPENAI_BASE_URL=ctx.fake.base_url,
            WORKSPACE_ROOT=str(root),
        )
        if DEFAULT_CONFIG_PATH.exists():  # a developer's config/config.toml must not leak in
            empty = ctx.scratch / "p4-empty-config.toml"
            empty.write_text("")
            env["DURABLE_MANUS_CONFIG"] = str(empty)
        logs = ctx.scratch / "p4-logs"
        logs.mkdir(exist_ok=True)
        self.log_path = logs / f"{name}.log"
        self.started_wall = time.time()
        with open(self.log_path, "wb") as out:
            self.process = subprocess.Popen(
                [sys.executable, str(REPO_DIR / "worker.py"), "--connect-timeout", "20"],
                cwd=REPO_DIR, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def kill(self) -> float:
        """SIGKILL the whole group; returns the wall time of the kill."""
        killed = time.time()
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait(timeout=10)
        return killed

    def stop(self) -> None:
        _stop_group(self.process, 15)


class ServerMetrics:
    """Counters from the dev server's Prometheus endpoint."""

    HEARTBEATS = ("service_requests", "RecordActivityTaskHeartbeat", "frontend")
    WRITES = ("persistence_requests", "UpdateWorkflowExecution", "history")
    _LINE = re.compile(r"^(\w+)\{([^}]*)\} (\S+)$")

    def __init__(self, port: int) -> None:
        self.url = f"http://127.0.0.1:{port}/metrics"

    def _read(self) -> dict[tuple[str, str, str], float]:
        with urllib.request.urlopen(self.url, timeout=10) as response:
            text = response.read().decode()
        totals: dict[tuple[str, str, str], float] = {}
        for line in text.splitlines():
            found = self._LINE.match(line)
            if not found:
                continue
            labels = dict(re.findall(r'(\w+)="([^"]*)"', found.group(2)))
            key = (found.group(1), labels.get("operation", ""), labels.get("service_name", ""))
            if key in (self.HEARTBEATS, self.WRITES):
                totals[key] = totals.get(key, 0.0) + float(found.group(3))
        return totals

    async def read(self) -> tuple[float, dict[tuple[str, str, str], float]]:
        return time.monotonic(), await asyncio.to_thread(self._read)

    @staticmethod
    def rates(before, after) -> dict[str, float]:
        """Per second between two reads: heartbeat RPCs and the server's writes of run state."""
        (t0, a), (t1, b) = before, after
        span = t1 - t0
        return {
            "heartbeats": (b.get(ServerMetrics.HEARTBEATS, 0) - a.get(ServerMetrics.HEARTBEATS, 0)) / span,
            "writes": (b.get(ServerMetrics.WRITES, 0) - a.get(ServerMetrics.WRITES, 0)) / span,
        }


async def until(predicate, timeout: float, what: str, interval: float = 0.05):
    deadline = time.monotonic() + timeout
    while True:
        value = await predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"P4: no {what} within {timeout:.0f} s")
        await asyncio.sleep(interval)


async def last_heartbeat(handle, activity_type: str) -> float | None:
    pending = await pending_activity(handle, activity_type)
    if pending is None or not pending.HasField("last_heartbeat_time"):
        return None
    return pending.last_heartbeat_time.ToNanoseconds() / 1e9


async def first_poll(ctx: Context, queue: str, pid: int, timeout: float) -> float:
    """Server time of the first poll of process pid on the queue (workflow or activity tasks)."""
    seen: dict[int, float] = {}

    async def polling():
        for kind in (TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW, TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY):
            if kind in seen:
                continue
            response = await ctx.client.workflow_service.describe_task_queue(
                DescribeTaskQueueRequest(
                    namespace=ctx.client.namespace, task_queue=TaskQueue(name=queue), task_queue_type=kind,
                )
            )
            for poller in response.pollers:
                if poller.identity.startswith(f"{pid}@"):
                    # A long poll lasts up to a minute: the first one seen is the first one made.
                    seen[kind] = poller.last_access_time.ToNanoseconds() / 1e9
        return len(seen) == 2

    await until(polling, timeout, "poll of the new worker", interval=0.1)
    return min(seen.values())


def _time(event) -> float:
    return event.event_time.ToNanoseconds() / 1e9


def analyse(history, scenario: Scenario) -> dict:
    """Server times of the retry's start and completion, of the workflow task
    after it and of the run's next scheduled activity; sticky timeouts."""
    events = list(history.events)
    slow = [
        e.event_id for e in events
        if e.HasField("activity_task_scheduled_event_attributes")
        and e.activity_task_scheduled_event_attributes.activity_type.name == scenario.interrupted
    ][SLOW_STEP]
    found: dict = {"sticky_timeouts": 0, "heartbeat_timeout": False}
    for e in events:
        if e.HasField("activity_task_started_event_attributes"):
            started = e.activity_task_started_event_attributes
            if started.scheduled_event_id == slow:
                found["retry_started"] = _time(e)
                failure = started.last_failure
                found["heartbeat_timeout"] = (
                    failure.HasField("timeout_failure_info")
                    and failure.timeout_failure_info.timeout_type == TimeoutType.TIMEOUT_TYPE_HEARTBEAT
                )
        elif e.HasField("activity_task_completed_event_attributes"):
            if e.activity_task_completed_event_attributes.scheduled_event_id == slow:
                found["retry_done"] = _time(e)
        elif "retry_done" not in found:
            continue
        elif e.HasField("workflow_task_started_event_attributes"):
            found.setdefault("task_started", _time(e))
        elif e.HasField("workflow_task_timed_out_event_attributes"):
            kind = e.workflow_task_timed_out_event_attributes.timeout_type
            found["sticky_timeouts"] += kind == TimeoutType.TIMEOUT_TYPE_SCHEDULE_TO_START
        elif e.HasField("activity_task_scheduled_event_attributes"):
            found.setdefault("moved_on", _time(e))
    missing = {"retry_started", "retry_done", "task_started", "moved_on"} - set(found)
    if missing:
        raise RuntimeError(f"P4 {scenario.name}: the history lacks {', '.join(sorted(missing))}")
    return found


async def one_trial(ctx: Context, scenario: Scenario, trial: int) -> dict:
    queue = new_run_id(f"bench-p4-{scenario.name}")
    root = ctx.workspace(f"p4-{scenario.name}-{trial}")
    settings = bench_settings(ctx.fake.base_url, root, queue)
    run_id = new_run_id(f"bench-p4-{scenario.name}")
    directory = root / workspace_name_for(run_id)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / NOTES).write_text("a small file\n" * 5)
    first = WorkerProcess(ctx, queue, root, f"{scenario.name}{trial}-worker1")
    second = None
    try:
        handle = await start_agent(
            ctx.client, settings, bench_profile(STEPS, [scenario.tool]), scenario.script(run_id), run_id=run_id
        )

        async def at_slow_step():
            turns = [r["turn"] for r in await ctx.fake.stats() if r["run"] == run_id]
            return bool(turns) and max(turns) >= SLOW_STEP

        await until(at_slow_step, 60, "slow step")
        # The kill comes just after the call's first heartbeat reached the server.
        await until(
            lambda: last_heartbeat(handle, scenario.interrupted), 30, f"heartbeat of the slow {scenario.interrupted}",
            interval=0.02,
        )
        killed = first.kill()
        second = WorkerProcess(ctx, queue, root, f"{scenario.name}{trial}-worker2")
        polled = await first_poll(ctx, queue, second.process.pid, 30)
        result = await asyncio.wait_for(final_result(handle), RUN_TIMEOUT)
        check_result(result, STEPS, f"P4 {scenario.name} run")
        found = analyse(await handle.fetch_history(), scenario)
        outcome = {
            "kill_to_next": found["moved_on"] - killed,
            "poll_to_next": found["moved_on"] - polled,
            "kill_to_retry": found["retry_started"] - killed,
            "retry_to_task": found["task_started"] - found["retry_done"],
            "start_to_poll": polled - second.started_wall,
            "heartbeat_timeout": found["heartbeat_timeout"],
            "sticky_timeouts": found["sticky_timeouts"],
        }
        log(f"P4 {scenario.name} trial {trial}: kill -> run moves on {outcome['kill_to_next']:.2f} s, first poll -> "
            f"run moves on {outcome['poll_to_next']:.2f} s, kill -> retry {outcome['kill_to_retry']:.2f} s, "
            f"retry done -> workflow task {outcome['retry_to_task']:.2f} s, worker polling after "
            f"{outcome['start_to_poll']:.2f} s")
        return outcome
    finally:
        first.stop()
        if second is not None:
            second.stop()


async def heartbeat_rates(ctx: Context, metrics: ServerMetrics) -> dict[str, dict[str, float]]:
    """Heartbeat RPCs and run-state writes per second on the server with one
    worker running: one slow think, one slow bash call, then CONCURRENT slow thinks."""
    queue = new_run_id("bench-p4-rate")
    root = ctx.workspace("p4-rate")
    settings = bench_settings(ctx.fake.base_url, root, queue)
    worker = WorkerProcess(ctx, queue, root, "rate-worker")
    handles: list = []

    async def start(count: int, scenario: Scenario) -> list:
        started = []
        for _ in range(count):
            run_id = new_run_id("bench-p4-rate")
            (root / workspace_name_for(run_id)).mkdir(parents=True, exist_ok=True)
            script = scenario.script(run_id)
            if scenario.interrupted == "think":
                script.update(slow_turn=0)
            else:  # the first bash call sleeps
                script["args"] = {"command": f"sleep {SLOW_DELAY:g}"}
            started.append(await start_agent(
                ctx.client, settings, bench_profile(1, [scenario.tool]), script, run_id=run_id
            ))
        handles.extend(started)
        return started

    async def measure(runs: list, activity_type: str) -> dict[str, float]:
        async def all_heartbeating():
            beats = await asyncio.gather(*(last_heartbeat(h, activity_type) for h in runs))
            return all(b is not None for b in beats)

        await until(all_heartbeating, 60, f"heartbeats of {len(runs)} {activity_type} calls", interval=0.2)
        before = await metrics.read()
        await asyncio.sleep(RATE_WINDOW)
        rates = ServerMetrics.rates(before, await metrics.read())
        for handle in runs:
            await handle.terminate("P4 heartbeat rate measured")
        await asyncio.sleep(3.0)  # a terminated call heartbeats ~2 s more before it hears
        return rates

    think, shell = SCENARIOS
    try:
        return {
            "1 think": await measure(await start(1, think), "think"),
            "1 bash call": await measure(await start(1, shell), shell.interrupted),
            f"{CONCURRENT} thinks": await measure(await start(CONCURRENT, think), "think"),
        }
    finally:
        for handle in handles:
            try:
                await handle.terminate("P4 done")
            except Exception:  # already closed
                pass
        worker.stop()


async def run(ctx: Context) -> Section:
    trials = 1 if ctx.quick else 3
    metrics_port = free_port()
    server = DevServer(ctx.scratch / "p4-server", ["--metrics-port", str(metrics_port)])
    try:
        own = dataclasses.replace(ctx, server=server, client=await server.start())
        outcomes = {s.name: [await one_trial(own, s, t + 1) for t in range(trials)] for s in SCENARIOS}
        rates = await heartbeat_rates(own, ServerMetrics(metrics_port))
    finally:
        server.stop()
    return report(outcomes, rates, trials)


def report(outcomes: dict[str, list[dict]], rates: dict[str, dict[str, float]], trials: int) -> Section:
    keys = ["kill_to_next", "poll_to_next", "kill_to_retry", "retry_to_task", "start_to_poll"]
    labels = {
        "kill_to_next": "SIGKILL -> the run's next call scheduled",
        "poll_to_next": "**new worker's first poll -> the run's next call scheduled**",
        "kill_to_retry": "SIGKILL -> retry of the interrupted call started",
        "retry_to_task": "retried call completed -> next workflow task started",
        "start_to_poll": "new worker started -> its first poll",
    }
    by = {s.name: s for s in SCENARIOS}
    names = list(outcomes)
    samples = {n: {k: Samples([o[k] for o in outcomes[n]]) for k in keys} for n in names}
    section = Section("P4 resume after a worker crash")
    section.markdown += [
        f"worker.py SIGKILLed during the third step of a {STEPS}-step run, just after the first heartbeat "
        "of the interrupted call (the think, or the bash call) reached the server: the worst moment for "
        "the heartbeat timer and for the dead worker's sticky queue. A new worker.py started at once. "
        f"{trials} trial(s) each, median (min-max), server timestamps. Target: the run moves on within "
        f"{TARGET:g} s of the new worker's first poll.",
        "",
        "| interval, seconds | " + " | ".join(f"{n} interrupted" for n in names) + " |",
        "|---|" + "---|" * len(names),
        *[f"| {labels[k]} | " + " | ".join(samples[n][k].spread(fmt="{:.2f}") for n in names) + " |" for k in keys],
        "| expected kill -> retry: heartbeat timeout + first retry interval | "
        + " | ".join(
            f"{_seconds(by[n].options['heartbeat_timeout']):g} + "
            f"{_seconds(by[n].options['retry_policy'].initial_interval):g}" for n in names
        ) + " |",
        "",
        "The retried attempt followed a heartbeat timeout in "
        + ", ".join(f"{sum(o['heartbeat_timeout'] for o in outcomes[n])}/{trials} ({n})" for n in names)
        + "; workflow tasks that timed out on the dead worker's sticky queue: "
        + ", ".join(f"{sum(o['sticky_timeouts'] for o in outcomes[n])} ({n})" for n in names) + ".",
        "",
        f"Heartbeat cost, from the server's counters (`--metrics-port`) over {RATE_WINDOW:g} s: "
        "RecordActivityTaskHeartbeat RPCs received, and the history service's UpdateWorkflowExecution "
        "writes (one per heartbeat, and one per heartbeat timeout to rearm its timer).",
        "",
        "| one worker running | heartbeat RPCs/s | run-state writes/s |",
        "|---|---|---|",
        *[f"| {what} | {r['heartbeats']:.2f} | {r['writes']:.2f} |" for what, r in rates.items()],
    ]
    for n in names:
        worst = max(o["poll_to_next"] for o in outcomes[n])
        section.summary.append((
            f"P4 {n} killed: first poll -> run moves on (median, max)",
            f"{samples[n]['poll_to_next'].median:.2f} s, {worst:.2f} s",
            f"< {TARGET:g} s",
            "met" if worst < TARGET else "MISSED",
        ))
        section.summary.append((
            f"P4 {n} killed: kill -> run moves on (median)",
            f"{samples[n]['kill_to_next'].median:.2f} s", f"~{by[n].expected_seconds:g} s", "",
        ))
    section.summary.append((
        "P4 heartbeat RPCs/s: " + ", ".join(rates), ", ".join(f"{r['heartbeats']:.2f}" for r in rates.values()), "", "",
    ))
    return section
