"""Crash injection: agent runs whose worker is SIGKILLed at a chosen point and
replaced by a fresh one, then checked against what Temporal promises.

Used by tests/test_crash_injection.py (N=4, on the session's dev server) and by
bench/crash_injection.py (N=20, on a dev server of its own).

Each run gets its own fake OpenAI server, task queue, workspace root and pair
of worker.py processes (the first is killed, the second finishes the run), so
runs can proceed side by side without disturbing each other. Kill points:

think    during the think call of turn k: the fake holds that reply for 30 s
         (only for the first worker; see `Script.released`), the worker is
         killed 0.3-3 s after the request arrived.
tool     during the python_execute call of turn k: the program sleeps 25 s on
         its first execution, the worker is killed 0.3-3 s after it started.
between  right after step k finished: the fake has served turn k, and the
         run's history shows turn k's python_execute as completed (polled
         every 10 ms); the worker is killed at once or 0-0.25 s later, i.e.
         while the workflow task that follows the completion runs, or while
         the next think is being scheduled/started. This is approximate: the
         report gives the kill's distance from the completion event and what
         the history shows in flight at the kill (a workflow task, the next
         think, or nothing yet). The next think's reply is held back for the
         first worker so that a kill that lands just after it was sent cannot
         lose a response the fake already counted as completed.
flow     during a child AgentWorkflow of a PlanningFlow: the think (turn 1)
         or the python_execute (turn 0) of step n's child, as above.

Every python_execute program appends `<run> <turn> <pid>` to its run's
execution log, outside the workspace (and the same line to an end log when it
finishes), so executions can be counted and a killed execution told from a
finished one. Tools run unconfined (DURABLE_MANUS_TOOL_SANDBOX=none), since the
sandbox hides everything outside the run directory; a plan with tool_sandbox
"auto" keeps its logs inside the run directory instead (pids are then those of
the sandbox's pid namespace). Tool processes are found by their working
directory (inside the run's workspace root), whatever pid namespace they are in.

What is checked per run (RunOutcome) and summed up (Summary):

* the run finished (agent: FINISHED/TERMINATED; flow: COMPLETED);
* completed think calls repeated: per (role, turn), fake requests with
  completed=True beyond the first; must be 0;
* tool executions of completed steps repeated: a python_execute activity is
  "completed before the kill" if its ActivityTaskCompleted event is older than
  the kill; its executions in the log beyond the attempts it took are repeats
  (must be 0). In-flight executions may run again (counted separately);
* resume: wall time from the new worker's start to the first activity of the
  run (any workflow of it) that completed afterwards; must stay well under the
  activities' start_to_close (minutes), i.e. bounded by heartbeat timeouts;
* no tool process of the run outlived the killed worker;
* flows: one child workflow run per plan step.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import statistics
import textwrap
import threading
import time
import uuid
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from typing import Callable

from temporalio.api.enums.v1 import TimeoutType
from temporalio.client import Client

from agent_model.flow import FlowOutcome, PlanningFlowInput, PlanningFlowResult
from agent_model.run import AgentRunInput, AgentRunResult
from agent_model.state import AgentState, StopReason
from activities.tools.call_cgroup import CGROUP_ROOT, PARENT_NAME
from agent_model.workspace_names import workspace_name_for
from prompts import planning as planning_prompts
from testkit.run_results import final_result
from testkit.e2e import Child, child_env, pid_alive, start_worker, wait_until
from testkit.fake_openai import FakeOpenAI, Reply, call, python, terminate, turn_of

KINDS = ("think", "tool", "between", "flow")
SLOW_REPLY_SECONDS = 30.0
"""How long the first worker's think call at the kill point is held."""
TOOL_SLEEP_SECONDS = 25.0
"""How long the first execution of the tool at the kill point sleeps (under
python_execute's own 30 s timeout)."""
RESUME_LIMIT_SECONDS = 30.0
"""Largest acceptable resume: heartbeat timeouts are 4 s (think, tools) and the
workflow task timeout 10 s; start_to_close timeouts are 2-10 minutes."""
RUN_TIMEOUT_SECONDS = 150.0
"""Upper bound for one run, kill and resume included."""
KILL_POINT_TIMEOUT_SECONDS = 60.0
ORPHAN_WAIT_SECONDS = 5.0


# ---- plans --------------------------------------------------------------------------


@dataclass(frozen=True)
class RunPlan:
    index: int
    kind: str
    run_id: str
    turns: int
    """Agent runs: LLM turns (the last one terminates). Flows: plan steps."""
    kill_turn: int
    """think/tool: the turn hit; between: the step after which the kill comes;
    flow: the child's turn hit (1 = its think, 0 = its tool)."""
    kill_delay: float
    flow_step: int = 0
    flow_target: str = ""
    tool_sandbox: str = "none"
    """The worker's DURABLE_MANUS_TOOL_SANDBOX. With "auto" (bubblewrap when the
    machine has it) tools can write only inside their run directory, so the
    execution logs go there; the logged pids are then pid-namespace pids."""

    def describe(self) -> str:
        if self.kind == "think":
            where = f"think of turn {self.kill_turn} (of {self.turns})"
        elif self.kind == "tool":
            where = f"tool of turn {self.kill_turn} (of {self.turns})"
        elif self.kind == "between":
            where = f"after step {self.kill_turn} (of {self.turns})"
        else:
            where = f"{self.flow_target} of step {self.flow_step}/{self.turns}"
        sandbox = "" if self.tool_sandbox == "none" else f" [sandbox {self.tool_sandbox}]"
        return f"{where} +{self.kill_delay:.2f}s{sandbox}"


def plan_runs(
    n: int, seed: int, kinds: tuple[str, ...] = KINDS, prefix: str = "crash", tool_sandbox: str = "none"
) -> list[RunPlan]:
    """n runs with seeded random kill points. Kinds are dealt round-robin, then
    shuffled (so N=4 gets one of each), the rest is drawn per run."""
    rng = random.Random(seed)
    dealt = [kinds[i % len(kinds)] for i in range(n)]
    rng.shuffle(dealt)
    tag = uuid.uuid4().hex[:6]
    plans = []
    for i, kind in enumerate(dealt):
        run_id = f"{prefix}-{seed}-{i}-{tag}"
        plans.append(_draw(rng, i, kind, run_id))
    return [replace(p, tool_sandbox=tool_sandbox) for p in plans]


def _draw(rng: random.Random, i: int, kind: str, run_id: str) -> RunPlan:
    if kind == "flow":
        steps = rng.randint(2, 3)
        target = rng.choice(["think", "tool"])
        return RunPlan(
            i, kind, run_id, steps, 1 if target == "think" else 0, rng.uniform(0.3, 3.0),
            flow_step=rng.randint(1, steps), flow_target=target,
        )
    # Kill points are drawn so that some steps completed before the kill
    # (their think and tool must not run again): a think of turn >= 1, a
    # tool of turn >= 1; "between" always follows a completed step.
    turns = rng.randint(2, 4) if kind == "think" else rng.randint(3, 4)
    if kind == "think":
        return RunPlan(i, kind, run_id, turns, rng.randint(1, turns - 1), rng.uniform(0.3, 3.0))
    if kind == "tool":
        return RunPlan(i, kind, run_id, turns, rng.randint(1, turns - 2), rng.uniform(0.3, 3.0))
    if kind == "between":
        return RunPlan(i, kind, run_id, turns, rng.randrange(turns - 1), rng.choice([0.0, rng.uniform(0.0, 0.25)]))
    raise ValueError(f"unknown kill point {kind!r}")


# ---- the scripted LLM -----------------------------------------------------------------


def role_of(body: dict) -> str:
    """Who made an LLM request: "agent" (a plain run), "plan", "replan",
    "summary" (a flow's own calls) or "step-N" (the child agent of step N)."""
    messages = body.get("messages") or []
    first = messages[0] if messages else {}
    system = first.get("content") if first.get("role") == "system" else ""
    system = system if isinstance(system, str) else ""
    if system.startswith(planning_prompts.PLAN_SYSTEM_PROMPT):
        return "plan"
    if system.startswith(planning_prompts.REPLAN_SYSTEM_PROMPT):
        return "replan"
    if system == planning_prompts.FINALIZE_SYSTEM_PROMPT:
        return "summary"
    for m in messages:
        if m.get("role") == "user" and isinstance(m.get("content"), str):
            marker = "Your step (step "
            at = m["content"].find(marker)
            if at >= 0:
                number = m["content"][at + len(marker):].split(")", 1)[0]
                return f"step-{number}"
            break
    return "agent"


def execution_code(log: Path, end_log: Path, tag: str, slow: bool) -> str:
    """The python_execute program for one (run, turn): logs `<tag> <pid>`; when
    `slow`, its first execution sleeps so that the worker can be killed."""
    sleep = ""
    if slow:
        sleep = f"""\
        with open(LOG) as f:
            mine = [line for line in f if line.rsplit(" ", 1)[0] == TAG]
        if len(mine) == 1:
            time.sleep({TOOL_SLEEP_SECONDS})
        """
    return textwrap.dedent(
        f"""\
        import os, time
        LOG, TAG = {str(log)!r}, {tag!r}
        with open(LOG, "a") as f:
            f.write(TAG + " " + str(os.getpid()) + "\\n")
        {sleep.strip()}
        with open({str(end_log)!r}, "a") as f:
            f.write(TAG + " " + str(os.getpid()) + "\\n")
        print("done:", TAG)
        """
    )


class Script:
    """The fake's responder for one run: replies by (role, turn); the reply at
    the kill point is held for SLOW_REPLY_SECONDS until `released` is set,
    which the driver does once the first worker is dead, so the replacement
    worker's calls are answered at once."""

    def __init__(self, replies: dict[str, list[Reply]], slow: tuple[str, int] | None) -> None:
        self.replies = replies
        self.slow = slow
        self.released = threading.Event()

    def __call__(self, body: dict, attempt: int):
        role, turn = role_of(body), turn_of(body)
        script = self.replies[role]
        reply = script[min(turn, len(script) - 1)]
        if (role, turn) == self.slow and not self.released.is_set():
            reply = replace(reply, delay=SLOW_REPLY_SECONDS)
        return reply


def build_script(plan: RunPlan, log: Path, end_log: Path) -> Script:
    if plan.kind != "flow":
        turns = [
            python(
                execution_code(log, end_log, f"{plan.run_id} {t}", slow=plan.kind == "tool" and t == plan.kill_turn)
            )
            for t in range(plan.turns - 1)
        ]
        turns.append(terminate(f"{plan.run_id} finished"))
        slow = {"think": ("agent", plan.kill_turn), "between": ("agent", plan.kill_turn + 1)}.get(plan.kind)
        return Script({"agent": turns}, slow)
    replies: dict[str, list[Reply]] = {
        "plan": [
            Reply(tool_calls=[call("planning", {
                "command": "create", "plan_id": "p", "title": "crash test",
                "steps": [f"Do part {n}" for n in range(1, plan.turns + 1)],
            })])
        ],
        "summary": [Reply(content="All parts done.")],
        "replan": [Reply(content="No change.")],
    }
    for n in range(1, plan.turns + 1):
        slow_tool = plan.flow_target == "tool" and n == plan.flow_step
        replies[f"step-{n}"] = [
            python(execution_code(log, end_log, f"{plan.run_id}/step-{n} 0", slow=slow_tool)),
            terminate(f"part {n} done"),
        ]
    slow = (f"step-{plan.flow_step}", 1) if plan.flow_target == "think" else None
    return Script(replies, slow)


# ---- history ----------------------------------------------------------------------------


def _seconds(timestamp) -> float:
    return timestamp.seconds + timestamp.nanos / 1e9


@dataclass
class ActivityRecord:
    workflow_id: str
    type: str
    scheduled: float
    """Wall-clock (epoch) seconds of the events, as the server wrote them."""
    completed: float | None = None
    closed: float | None = None
    attempt: int = 0
    """The attempt that ended it (0: never started)."""
    previous_timeout: str | None = None
    """Timeout type of the attempt before the last one, if it timed out."""


@dataclass
class WorkflowRecord:
    workflow_id: str
    activities: list[ActivityRecord]
    workflow_task_timeouts: int
    closed: float | None
    workflow_tasks: list[tuple[float, float | None, str]] = field(default_factory=list)
    """(scheduled, closed, how it closed) of every workflow task."""


async def read_history(client: Client, workflow_id: str) -> WorkflowRecord:
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    by_scheduled: dict[int, ActivityRecord] = {}
    activities: list[ActivityRecord] = []
    wft_timeouts = 0
    closed = None
    tasks: dict[int, list] = {}
    for e in history.events:
        when = _seconds(e.event_time)
        if e.HasField("activity_task_scheduled_event_attributes"):
            record = ActivityRecord(workflow_id, e.activity_task_scheduled_event_attributes.activity_type.name, when)
            by_scheduled[e.event_id] = record
            activities.append(record)
        elif e.HasField("activity_task_started_event_attributes"):
            a = e.activity_task_started_event_attributes
            record = by_scheduled[a.scheduled_event_id]
            record.attempt = a.attempt
            if a.HasField("last_failure") and a.last_failure.HasField("timeout_failure_info"):
                record.previous_timeout = TimeoutType.Name(a.last_failure.timeout_failure_info.timeout_type)
        elif e.HasField("activity_task_completed_event_attributes"):
            record = by_scheduled[e.activity_task_completed_event_attributes.scheduled_event_id]
            record.completed = record.closed = when
        else:
            for kind in ("failed", "timed_out", "canceled"):
                field_name = f"activity_task_{kind}_event_attributes"
                if e.HasField(field_name):
                    by_scheduled[getattr(e, field_name).scheduled_event_id].closed = when
            if e.HasField("workflow_task_scheduled_event_attributes"):
                tasks[e.event_id] = [when, None, "open"]
            for kind in ("completed", "timed_out", "failed"):
                field_name = f"workflow_task_{kind}_event_attributes"
                if e.HasField(field_name):
                    attributes = getattr(e, field_name)
                    task = tasks.get(attributes.scheduled_event_id)
                    if task is not None:
                        how = kind.replace("_", " ")
                        if kind == "timed_out":
                            how += ": " + TimeoutType.Name(attributes.timeout_type).removeprefix("TIMEOUT_TYPE_")
                        task[1:] = [when, how]
            if e.HasField("workflow_task_timed_out_event_attributes"):
                wft_timeouts += 1
            if e.HasField("workflow_execution_completed_event_attributes") or e.HasField(
                "workflow_execution_failed_event_attributes"
            ):
                closed = when
    return WorkflowRecord(workflow_id, activities, wft_timeouts, closed, [tuple(t) for t in tasks.values()])


async def completed_count(client: Client, workflow_id: str, activity_type: str) -> int:
    record = await read_history(client, workflow_id)
    return sum(1 for a in record.activities if a.type == activity_type and a.completed is not None)


# ---- processes ---------------------------------------------------------------------------


def processes_under(root: Path) -> list[int]:
    """Live processes whose working directory is inside `root` (a run's
    workspace root): the tool processes of that run, whatever their pid."""
    prefix = os.path.realpath(root)
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            cwd = os.readlink(f"/proc/{entry.name}/cwd")
        except OSError:
            continue
        if (cwd == prefix or cwd.startswith(prefix + "/")) and pid_alive(int(entry.name)):
            found.append(int(entry.name))
    return found


def kill_processes_under(root: Path) -> None:
    own = os.getpgrp()
    for pid in processes_under(root):
        try:
            group = os.getpgid(pid)
            if group != own:
                os.killpg(group, signal.SIGKILL)
            else:
                os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def tool_cgroups(pids: list[int]) -> set[Path]:
    """The per-call pids cgroups (activities/tools/call_cgroup.py) these processes are in."""
    found = set()
    for pid in pids:
        try:
            lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
        except OSError:
            continue
        for line in lines:
            _, controllers, path = line.split(":", 2)
            if f"/{PARENT_NAME}/" not in path:
                continue
            if "pids" in controllers.split(","):
                found.add(CGROUP_ROOT / "pids" / path.lstrip("/"))
            elif controllers == "":
                found.add(CGROUP_ROOT / path.lstrip("/"))
    return found


def remove_cgroups(groups: set[Path]) -> list[str]:
    """Those of `groups` still there (left behind), after removing them; a
    cgroup with live processes cannot be removed and is left alone."""
    left = []
    for group in sorted(groups):
        if group.exists():
            left.append(group.name)
            try:
                group.rmdir()
            except OSError:
                pass
    return left


def read_tags(path: Path) -> list[str]:
    if not path.exists():
        return []
    return [line.rsplit(" ", 1)[0] for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


# ---- one run ---------------------------------------------------------------------------------


@dataclass
class RunOutcome:
    plan: RunPlan
    finished: bool = False
    end: str = ""
    think_repeats: int = 0
    tool_repeats: int = 0
    """Executions of python_execute activities that had completed before the kill, beyond their attempts."""
    unexplained_executions: int = 0
    """Executions beyond the attempts of any activity (should be 0 too)."""
    in_flight_reruns: int = 0
    """Tool executions that ran again because the kill interrupted them (allowed)."""
    killed_mid_run: int = 0
    """Tool executions that started and never finished (the killed ones)."""
    child_runs_repeated: int = 0
    """Flows: child workflow runs beyond one per plan step (must be 0)."""
    lost_thinks: int = 0
    """Think requests that never got their response to the worker (the killed ones)."""
    in_flight: list[str] = field(default_factory=list)
    """What the server had open at the kill, read back from the history:
    workflow tasks (and how they ended) and activities (with the attempt that
    finally ended them); also activities the dead worker's last message
    scheduled just after the kill."""
    tool_processes_at_kill: int = 0
    """Tool processes of the run alive just before the kill (so the orphan check is not vacuous)."""
    cgroups_at_kill: int = 0
    """Per-call pids cgroups of the tool processes at the kill (sandboxed runs)."""
    cgroups_left: list[str] = field(default_factory=list)
    """Of those, the ones still there after the run: the killed call never
    removed its cgroup. Reported, and removed by the driver, not a check."""
    kill_after_step: float | None = None
    """between: seconds from the step's tool completion (server time) to the kill."""
    heartbeat_retries: list[str] = field(default_factory=list)
    """Activities whose last attempt followed a timed-out one, with the timeout type."""
    workflow_task_timeouts: int = 0
    resume: float | None = None
    orphans: list[int] = field(default_factory=list)
    tools_gone_after: float | None = None
    """Seconds from the kill until no tool process of the run was left."""
    kill_at: float = 0.0
    duration: float = 0.0
    error: str | None = None
    log_dir: Path | None = None

    @property
    def ok(self) -> bool:
        return (
            self.error is None
            and self.finished
            and self.think_repeats == 0
            and self.tool_repeats == 0
            and self.unexplained_executions == 0
            and self.child_runs_repeated == 0
            and not self.orphans
            and self.resume is not None
            and self.resume < RESUME_LIMIT_SECONDS
        )


class CrashDriver:
    """Runs RunPlans against a Temporal server (`client`, reachable at `address`)."""

    def __init__(self, client: Client, address: str, base_dir: Path, say: Callable[[str], None] = print) -> None:
        self.client = client
        self.address = address
        self.base_dir = base_dir
        self.say = say
        base_dir.mkdir(parents=True, exist_ok=True)

    async def run_all(self, plans: list[RunPlan], concurrency: int = 4) -> list[RunOutcome]:
        gate = asyncio.Semaphore(concurrency)

        async def one(plan: RunPlan) -> RunOutcome:
            async with gate:
                return await self.run_one(plan)

        return list(await asyncio.gather(*(one(p) for p in plans)))

    async def run_one(self, plan: RunPlan) -> RunOutcome:
        outcome = RunOutcome(plan)
        run_dir = self.base_dir / f"run-{plan.index:02d}"
        workspace = run_dir / "workspace"
        outcome.log_dir = run_dir / "logs"
        if plan.tool_sandbox == "none":  # outside the workspace
            logs = (run_dir / "executions.log", run_dir / "finished-executions.log")
        else:  # the only place a sandboxed tool can write: its run directory
            directory = workspace / workspace_name_for(plan.run_id)
            logs = (directory / ".crash-executions.log", directory / ".crash-finished-executions.log")
        script = build_script(plan, *logs)
        fake = FakeOpenAI(responder=script).start()
        env = child_env(
            run_dir,
            address=self.address,
            task_queue=f"crash-{uuid.uuid4().hex[:10]}",
            base_url=fake.base_url,
            workspace_root=workspace,
            extra={"DURABLE_MANUS_TOOL_SANDBOX": plan.tool_sandbox},
        )
        began = time.monotonic()
        cgroups: set[Path] = set()
        first: Child | None = None
        second: Child | None = None
        try:
            first = start_worker(env, outcome.log_dir, name="worker1")
            if plan.kind == "flow":
                handle = await self.client.start_workflow(
                    "PlanningFlowWorkflow",
                    PlanningFlowInput(task=f"crash test flow {plan.run_id}"),
                    id=plan.run_id,
                    task_queue=env["TEMPORAL_TASK_QUEUE"],
                    result_type=PlanningFlowResult,
                    execution_timeout=timedelta(seconds=3600),
                )
            else:
                handle = await self.client.start_workflow(
                    "AgentWorkflow",
                    AgentRunInput(task=f"crash test run {plan.run_id}", agent="manus"),
                    id=plan.run_id,
                    task_queue=env["TEMPORAL_TASK_QUEUE"],
                    result_type=AgentRunResult,
                )

            await self._reach_kill_point(plan, fake, first, logs)
            await asyncio.sleep(plan.kill_delay)
            if first.returncode is not None:
                raise RuntimeError(f"worker1 exited before the kill\n{first.describe()}")
            at_kill = processes_under(workspace)
            outcome.tool_processes_at_kill = len(at_kill)
            cgroups = tool_cgroups(at_kill)
            outcome.cgroups_at_kill = len(cgroups)
            outcome.kill_at = time.time()
            first.kill()
            script.released.set()  # only now: every later request comes from the new worker

            # The killed worker's tool processes must die with it (parent-death
            # signal), before the replacement could start a second copy.
            try:
                await wait_until(lambda: not processes_under(workspace), ORPHAN_WAIT_SECONDS, "orphans", 0.01)
                outcome.tools_gone_after = time.time() - outcome.kill_at
            except TimeoutError:
                outcome.orphans = processes_under(workspace)

            new_worker_at = time.time()
            second = start_worker(env, outcome.log_dir, name="worker2")
            result = await asyncio.wait_for(final_result(handle), RUN_TIMEOUT_SECONDS)
            if plan.kind == "flow":
                outcome.finished = result.outcome == FlowOutcome.COMPLETED
                outcome.end = f"flow {result.outcome.value}"
            else:
                outcome.finished = (result.state, result.stop_reason) == (AgentState.FINISHED, StopReason.TERMINATED)
                outcome.end = f"{result.state.value}/{result.stop_reason.value}"
            await self._analyse(plan, outcome, fake, new_worker_at, logs)
        except Exception as e:  # reported per run; the summary fails the test
            outcome.error = f"{type(e).__name__}: {e}"
            for child in (first, second):
                if child is not None:
                    outcome.error += f"\n{child.describe()}"
        finally:
            for child in (first, second):
                if child is not None:
                    child.kill()
            fake.stop()
            kill_processes_under(workspace)
            outcome.cgroups_left = remove_cgroups(cgroups)
            outcome.duration = time.monotonic() - began
        self.say(self.line(outcome))
        return outcome

    async def _reach_kill_point(self, plan: RunPlan, fake: FakeOpenAI, worker: Child, logs: tuple[Path, Path]) -> None:
        def worker_alive() -> None:
            if worker.returncode is not None:
                raise RuntimeError(f"worker1 died early\n{worker.describe()}")

        def request_arrived(role: str, turn: int) -> bool:
            worker_alive()
            return any(role_of(r.body) == role and r.turn == turn for r in list(fake.requests))

        def started(tag: str) -> bool:
            worker_alive()
            return tag in read_tags(logs[0])

        t = KILL_POINT_TIMEOUT_SECONDS
        if plan.kind == "think":
            await wait_until(
                lambda: request_arrived("agent", plan.kill_turn), t, f"think of turn {plan.kill_turn}", interval=0.03
            )
        elif plan.kind == "tool":
            await wait_until(
                lambda: started(f"{plan.run_id} {plan.kill_turn}"), t, f"tool of turn {plan.kill_turn}", interval=0.03
            )
        elif plan.kind == "between":
            tag = f"{plan.run_id} {plan.kill_turn}"
            await wait_until(
                lambda: tag in read_tags(logs[1]), t, f"tool of turn {plan.kill_turn} to end", interval=0.03
            )

            async def step_done() -> bool:
                worker_alive()
                served = any(r.turn == plan.kill_turn and r.completed for r in list(fake.requests))
                done = await completed_count(self.client, plan.run_id, "python_execute")
                return served and done >= plan.kill_turn + 1

            await wait_until(step_done, t, f"step {plan.kill_turn} to complete in the history", 0.01)
        elif plan.flow_target == "think":
            role = f"step-{plan.flow_step}"
            await wait_until(lambda: request_arrived(role, 1), t, f"{role}'s think of turn 1", interval=0.03)
        else:
            tag = f"{plan.run_id}/step-{plan.flow_step} 0"
            await wait_until(lambda: started(tag), t, f"tool of step {plan.flow_step}", interval=0.03)

    async def _analyse(
        self, plan: RunPlan, outcome: RunOutcome, fake: FakeOpenAI, new_worker_at: float, logs: tuple[Path, Path]
    ) -> None:
        # Think calls: a (role, turn) answered completely more than once was repeated.
        completed: dict[tuple[str, int], int] = {}
        for r in list(fake.requests):
            key = (role_of(r.body), r.turn)
            if r.completed:
                completed[key] = completed.get(key, 0) + 1
            else:
                outcome.lost_thinks += 1
        outcome.think_repeats = sum(c - 1 for c in completed.values() if c > 1)

        # Tool executions against the history.
        workflow_ids = [plan.run_id]
        if plan.kind == "flow":
            workflow_ids += [f"{plan.run_id}/step-{n}" for n in range(1, plan.turns + 1)]
        records = [await read_history(self.client, w) for w in workflow_ids]
        starts, ends = read_tags(logs[0]), read_tags(logs[1])
        mine = [s for s in starts if s.split(" ", 1)[0] in workflow_ids]
        matched: set[str] = set()
        for record in records:
            outcome.workflow_task_timeouts += record.workflow_task_timeouts
            tools = [a for a in record.activities if a.type == "python_execute"]
            for turn, activity in enumerate(tools):
                tag = f"{record.workflow_id} {turn}"
                if plan.kind == "between" and turn == plan.kill_turn and activity.completed is not None:
                    outcome.kill_after_step = outcome.kill_at - activity.completed
                matched.add(tag)
                executions = starts.count(tag)
                outcome.killed_mid_run += executions - ends.count(tag)
                if activity.completed is not None and activity.completed < outcome.kill_at:
                    outcome.tool_repeats += max(0, executions - activity.attempt)
                else:
                    outcome.in_flight_reruns += max(0, executions - 1)
                outcome.unexplained_executions += max(0, executions - max(activity.attempt, 1))
            short = record.workflow_id.replace(plan.run_id, "").lstrip("/")
            prefix = f"{short}:" if short else ""
            for scheduled, closed, how in record.workflow_tasks:
                if scheduled < outcome.kill_at and (closed is None or closed > outcome.kill_at):
                    outcome.in_flight.append(f"{prefix}workflow-task({how})")
            for activity in record.activities:
                name = f"{prefix}{activity.type}"
                if activity.scheduled < outcome.kill_at and (activity.closed is None or activity.closed > outcome.kill_at):
                    outcome.in_flight.append(f"{name}(attempt {activity.attempt})")
                elif outcome.kill_at <= activity.scheduled < new_worker_at:
                    # The dead worker's last workflow task completion reached the server after the kill.
                    outcome.in_flight.append(f"{name}(scheduled just after the kill, attempt {activity.attempt})")
                if activity.previous_timeout:
                    outcome.heartbeat_retries.append(f"{name}:{activity.previous_timeout.removeprefix('TIMEOUT_TYPE_')}")
        outcome.unexplained_executions += sum(1 for s in mine if s not in matched)
        for child in workflow_ids[1:]:  # flows: one child run per step, never a second one
            runs = [w async for w in self.client.list_workflows(f'WorkflowId = "{child}"')]
            outcome.child_runs_repeated += max(0, len(runs) - 1)

        # Resume: new worker start -> the first activity of the run completed after it.
        after = [
            a.completed for r in records for a in r.activities if a.completed is not None and a.completed > new_worker_at
        ]
        if not after:  # nothing left but the workflow's own ending
            after = [r.closed for r in records if r.closed is not None and r.closed > new_worker_at]
        outcome.resume = min(after) - new_worker_at if after else None

    @staticmethod
    def line(o: RunOutcome) -> str:
        p = o.plan
        resume = f"{o.resume:5.1f}s" if o.resume is not None else "   - "
        status = "ok " if o.ok else "BAD"
        text = (
            f"[{status}] run {p.index:2d} {p.kind:<8} {p.describe():<34} {o.end or '-':<22} "
            f"resume {resume}  think-rep {o.think_repeats} tool-rep {o.tool_repeats} "
            f"in-flight rerun {o.in_flight_reruns}  in flight at kill: {', '.join(o.in_flight) or '(none)'}"
        )
        if o.kill_after_step is not None:
            text += f"  kill {o.kill_after_step * 1000:.0f} ms after the step"
        if o.heartbeat_retries:
            text += f"  retried after: {', '.join(o.heartbeat_retries)}"
        if o.tool_processes_at_kill:
            text += f"  tool processes at kill: {o.tool_processes_at_kill}"
            if o.tools_gone_after is not None:
                text += f" (gone {o.tools_gone_after * 1000:.0f} ms after)"
        if o.cgroups_at_kill:
            text += f", in {o.cgroups_at_kill} cgroup(s), {len(o.cgroups_left)} left behind"
        if o.workflow_task_timeouts:
            text += f"  workflow task timeouts: {o.workflow_task_timeouts}"
        if o.orphans:
            text += f"  ORPHANS {o.orphans}"
        if o.error:
            text += f"\n    error: {o.error.splitlines()[0]}  (logs: {o.log_dir})"
        return text


# ---- summary ------------------------------------------------------------------------------------


@dataclass
class Summary:
    seed: int
    outcomes: list[RunOutcome]
    duration: float

    @property
    def started(self) -> int:
        return len(self.outcomes)

    @property
    def finished(self) -> int:
        return sum(1 for o in self.outcomes if o.finished and o.error is None)

    @property
    def think_repeats(self) -> int:
        return sum(o.think_repeats for o in self.outcomes)

    @property
    def tool_repeats(self) -> int:
        return sum(o.tool_repeats for o in self.outcomes)

    @property
    def unexplained_executions(self) -> int:
        return sum(o.unexplained_executions for o in self.outcomes)

    @property
    def child_runs_repeated(self) -> int:
        return sum(o.child_runs_repeated for o in self.outcomes)

    @property
    def resumes(self) -> list[float]:
        return [o.resume for o in self.outcomes if o.resume is not None]

    @property
    def ok(self) -> bool:
        return all(o.ok for o in self.outcomes)

    def report(self) -> str:
        lines = [f"crash injection: seed {self.seed}, {self.started} runs, {self.duration:.0f} s"]
        lines += [CrashDriver.line(o) for o in self.outcomes]
        lines.append(f"runs finished / started: {self.finished}/{self.started}")
        lines.append(f"completed think calls repeated: {self.think_repeats}")
        lines.append(f"tool executions of completed steps repeated: {self.tool_repeats}")
        lines.append(f"tool executions not explained by an attempt: {self.unexplained_executions}")
        if any(o.plan.kind == "flow" for o in self.outcomes):
            lines.append(f"flow child runs repeated: {self.child_runs_repeated}")
        lines.append(
            f"in-flight tool executions run again (allowed): {sum(o.in_flight_reruns for o in self.outcomes)}; "
            f"killed mid-run: {sum(o.killed_mid_run for o in self.outcomes)}; "
            f"think calls lost in flight: {sum(o.lost_thinks for o in self.outcomes)}"
        )
        lines.append(
            f"orphaned tool processes: {sum(len(o.orphans) for o in self.outcomes)}; "
            f"workflow task timeouts: {sum(o.workflow_task_timeouts for o in self.outcomes)}"
        )
        if any(o.cgroups_at_kill for o in self.outcomes):
            lines.append(
                f"pids cgroups of killed tool calls left behind: {sum(len(o.cgroups_left) for o in self.outcomes)}"
                f" of {sum(o.cgroups_at_kill for o in self.outcomes)} (removed by the driver)"
            )
        lines.append("resume = new worker start -> the run's next completed activity:")
        lines.append(f"  all      {stats(self.resumes)}")
        for kind in KINDS:
            values = [o.resume for o in self.outcomes if o.plan.kind == kind and o.resume is not None]
            if values:
                lines.append(f"  {kind:<8} {stats(values)}")
        lines.append(f"verdict: {'PASS' if self.ok else 'FAIL'}")
        return "\n".join(lines)


def stats(values: list[float]) -> str:
    if not values:
        return "n=0"
    return (
        f"n={len(values)} median {statistics.median(values):.1f} s, min {min(values):.1f} s, "
        f"max {max(values):.1f} s (limit {RESUME_LIMIT_SECONDS:.0f} s)"
    )


async def run_crash_injection(
    client: Client,
    address: str,
    base_dir: Path,
    n: int,
    seed: int,
    concurrency: int = 4,
    kinds: tuple[str, ...] = KINDS,
    say: Callable[[str], None] = print,
    tool_sandbox: str = "none",
    extra: list[RunPlan] | None = None,
) -> Summary:
    """n runs drawn by plan_runs, plus any `extra` plans (their index follows)."""
    plans = plan_runs(n, seed, kinds, tool_sandbox=tool_sandbox)
    plans += [replace(p, index=n + i) for i, p in enumerate(extra or [])]
    say(f"crash injection: seed {seed}, {n} runs, concurrency {concurrency}")
    began = time.monotonic()
    outcomes = await CrashDriver(client, address, base_dir, say).run_all(plans, concurrency)
    return Summary(seed, outcomes, time.monotonic() - began)
