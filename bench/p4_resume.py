"""P4 resume: how long a run stalls when its worker is SIGKILLed mid-think.

worker.py runs as a child process (own session, environment-only config, as a
user would start it). A 5-step run (str_replace_editor `view` per step) gets
its third think answered only after 60 s on the first attempt; once that think
has heartbeated, the worker's process group is SIGKILLed and a new worker.py
is started at once. The retry of that think is answered at once. From the
run's history (server timestamps) and the fake's log:

    kill -> next step        SIGKILL to the completion of the interrupted step's tool call
    new worker -> next step  new worker's Popen to the same event
    kill -> think retried    SIGKILL to the retried think reaching the LLM
    new worker polling       new worker's Popen to its first poll seen by the server

The think's heartbeat timeout is 10 s (heartbeats every second) and its retry
policy waits 1 s before the second attempt, so ~10-12 s is expected. The kill
comes right after the think's first heartbeat reached the server. The SDK
sends the first heartbeat at once and then at most one every 0.8 x the
timeout (8 s), so this is the worst case. A kill later in that window is
noticed sooner.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time

from temporalio.api.enums.v1 import TaskQueueType, TimeoutType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest

from activities.workspace import workspace_name_for
from bench.common import (
    REPO_DIR,
    Samples,
    _stop_group,
    bench_profile,
    bench_settings,
    check_result,
    log,
    new_run_id,
    start_agent,
)
from bench.context import Context, Section
from config.settings import DEFAULT_CONFIG_PATH
from tests.e2e_support import has_heartbeated

TOOL = "str_replace_editor"
NOTES = "notes.txt"
STEPS = 5
SLOW_TURN = 2  # the third think
SLOW_DELAY = 60.0
EXPECTED = "~10-12 s"
RUN_TIMEOUT = 120.0


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


async def until(predicate, timeout: float, what: str, interval: float = 0.05):
    deadline = time.monotonic() + timeout
    while True:
        value = await predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"P4: no {what} within {timeout:.0f} s")
        await asyncio.sleep(interval)


async def first_poll_seen(ctx: Context, queue: str, pid: int, timeout: float) -> float:
    """Wall time when the server first lists a poller of process pid on the queue."""
    async def polling():
        response = await ctx.client.workflow_service.describe_task_queue(
            DescribeTaskQueueRequest(
                namespace=ctx.client.namespace, task_queue=TaskQueue(name=queue),
                task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY,
            )
        )
        return any(p.identity.startswith(f"{pid}@") for p in response.pollers)

    await until(polling, timeout, "poll of the new worker", interval=0.1)
    return time.time()


async def one_trial(ctx: Context, trial: int, extra_wait: float = 0.0) -> dict:
    """extra_wait: seconds to wait after the first heartbeat before the kill."""
    queue = new_run_id("bench-p4")
    root = ctx.workspace(f"p4-{trial}")
    settings = bench_settings(ctx.fake.base_url, root, queue)
    run_id = new_run_id("bench-p4-run")
    directory = root / workspace_name_for(run_id)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / NOTES).write_text("a small file\n" * 5)
    script = {
        "tool": TOOL, "args": {"command": "view", "path": NOTES},
        "slow_turn": SLOW_TURN, "slow_delay": SLOW_DELAY, "run": run_id,
    }
    first = WorkerProcess(ctx, queue, root, f"trial{trial}-worker1")
    second = None
    try:
        handle = await start_agent(ctx.client, settings, bench_profile(STEPS, [TOOL]), script, run_id=run_id)

        async def slow_think_reached():
            return any(r["run"] == run_id and r["turn"] == SLOW_TURN for r in await ctx.fake.stats())

        await until(slow_think_reached, 60, "slow think at the fake LLM")

        await until(lambda: has_heartbeated(handle, "think"), 15, "heartbeat of the slow think", interval=0.2)
        await asyncio.sleep(extra_wait)
        killed = first.kill()
        second = WorkerProcess(ctx, queue, root, f"trial{trial}-worker2")
        polling = await first_poll_seen(ctx, queue, second.process.pid, 30)
        result = await asyncio.wait_for(handle.result(), RUN_TIMEOUT)
        check_result(result, STEPS, "P4 run")

        history = await handle.fetch_history()
        thinks = [
            e.event_id for e in history.events
            if e.HasField("activity_task_scheduled_event_attributes")
            and e.activity_task_scheduled_event_attributes.activity_type.name == "think"
        ]
        slow_think = thinks[SLOW_TURN]
        step_done = None
        timeout_type = None
        for e in history.events:
            if e.event_id <= slow_think:
                continue
            if e.HasField("activity_task_started_event_attributes"):
                started = e.activity_task_started_event_attributes
                if started.scheduled_event_id == slow_think and started.HasField("last_failure"):
                    failure = started.last_failure
                    if failure.HasField("timeout_failure_info"):
                        timeout_type = failure.timeout_failure_info.timeout_type
            if e.HasField("activity_task_completed_event_attributes"):
                scheduled = e.activity_task_completed_event_attributes.scheduled_event_id
                if scheduled != slow_think:  # the interrupted step's tool call
                    step_done = e.event_time.ToNanoseconds() / 1e9
                    break
        if step_done is None:
            raise RuntimeError("P4: the interrupted step's tool call never completed")
        retried = [
            r["received"] for r in await ctx.fake.stats()
            if r["run"] == run_id and r["turn"] == SLOW_TURN and r["attempt"] == 1
        ]
        outcome = {
            "kill_to_step": step_done - killed,
            "start_to_step": step_done - second.started_wall,
            "kill_to_retry": (retried[0] - killed) if retried else float("nan"),
            "start_to_poll": polling - second.started_wall,
            "heartbeat_timeout": timeout_type == TimeoutType.TIMEOUT_TYPE_HEARTBEAT,
        }
        log(f"P4 trial {trial}: kill -> next step {outcome['kill_to_step']:.2f} s, new worker -> next step "
            f"{outcome['start_to_step']:.2f} s, kill -> think retried {outcome['kill_to_retry']:.2f} s, "
            f"worker polling after {outcome['start_to_poll']:.2f} s")
        return outcome
    finally:
        first.stop()
        if second is not None:
            second.stop()


async def run(ctx: Context) -> Section:
    trials = 1 if ctx.quick else 3
    outcomes = [await one_trial(ctx, t + 1) for t in range(trials)]
    keys = ["kill_to_step", "start_to_step", "kill_to_retry", "start_to_poll"]
    samples = {k: Samples([o[k] for o in outcomes]) for k in keys}
    labels = {
        "kill_to_step": "SIGKILL -> interrupted step completed",
        "start_to_step": "new worker started -> interrupted step completed",
        "kill_to_retry": "SIGKILL -> retried think reaches the LLM",
        "start_to_poll": "new worker started -> its first poll seen by the server",
    }
    section = Section("P4 resume after a worker crash")
    section.markdown += [
        f"worker.py SIGKILLed during the third think of a {STEPS}-step run, right after the think's first "
        "heartbeat reached the server (the worst moment: the SDK sends the next one only 8 s later), "
        f"a new worker.py started immediately; {trials} trial(s), median (min-max); expected {EXPECTED}.",
        "",
        "| interval | seconds |",
        "|---|---|",
        *[f"| {labels[k]} | {samples[k].spread(fmt='{:.2f}')} |" for k in keys],
        "",
        "The retried think's attempt failed with a heartbeat timeout in "
        f"{sum(o['heartbeat_timeout'] for o in outcomes)}/{trials} trials (the rest of the wait is the 1 s "
        "retry interval and the step itself).",
    ]
    section.summary += [
        ("P4 kill -> next step (median)", f"{samples['kill_to_step'].median:.2f} s", EXPECTED, ""),
        ("P4 new worker -> next step (median)", f"{samples['start_to_step'].median:.2f} s", "", ""),
    ]
    return section
