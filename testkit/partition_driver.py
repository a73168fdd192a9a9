"""Partition scenarios on a NetnsCluster (issue 25): one agent run starts on
worker a alone, b joins once the run reached the point of the cut, then a's
link goes dark; the run must carry on on b. Used by tests/test_partition.py.

tool     during the python_execute call of turn 0: its program sleeps 25 s on
         its first execution; a is cut ~1 s after it started.
think    during the think of turn 1: the fake holds that reply until the cut.
between  right after turn 0's python_execute completed on a (its program
         waits for a gate file the driver makes once b polls; the cut follows
         its ActivityTaskCompleted in the history, polled every 10 ms), i.e.
         while the next workflow task travels.

A scenario can go on once its run is done and analysed (`then`, with the
cluster still up): testkit/partition_heal.py heals the link after `tool`.

Every python_execute program appends JSON lines to a log outside the
workspace: "start", "alive" every ALIVE_INTERVAL while it sleeps, "end", each
with the network namespace's inode (which host ran it) and time.time(). A
background poll of the run's pending activities records which worker each
attempt was handed to. Everything is measured from the cut (time.time(), the
server's event times use the same clock: one kernel).
"""

from __future__ import annotations

import asyncio
import json
import textwrap
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from temporalio.api.enums.v1 import PendingActivityState
from temporalio.client import Client, WorkflowHandle

from agent_model.run import AgentRunResult
from agent_model.state import AgentState, StopReason
from runtime.run_start import agent_run_input
from testkit.crash_driver import completed_count, read_history
from testkit.e2e import wait_until
from testkit.fake_openai import Reply, python, terminate, turn_of
from testkit.netns_cluster import NetnsCluster
from testkit.run_results import final_result

if TYPE_CHECKING:
    from testkit.partition_heal import Rejoin

SCENARIOS = ("tool", "think", "between")
TOOL_SLEEP_SECONDS = 25.0
"""The first execution's sleep: under python_execute's 30 s timeout, far above its 4 s heartbeat timeout."""
HELD_THINK_SECONDS = 60.0
"""think: how long the fake holds turn 1's reply unless released (at the cut)."""
ALIVE_INTERVAL = 0.2
CUT_AFTER_START_SECONDS = 1.0
RUN_TIMEOUT_SECONDS = 150.0
POINT_TIMEOUT_SECONDS = 60.0
POLL_INTERVAL = 0.2
RETRY_TARGET_SECONDS = 10.5
"""Issue 25: the call runs on the other worker within ~10 s of the cut (one 10 s workflow task
timeout and the dispatch after it, when a task was in flight at the cut)."""
LOST_CALL_MARKERS = (
    "Heartbeat timeout", "heartbeat timeout", "activity timed out", "ScheduleToStart",
    "the worker running it stopped answering",  # prompts/agent_notes.py: the reschedule bound was reached
)


def program(log: Path, tag: str, sleep: float, first_only: bool, gate: Path | None = None) -> str:
    """Its first execution (every one unless first_only) sleeps `sleep` s, then waits for `gate` to exist."""
    return textwrap.dedent(
        f"""\
        import json, os, time
        LOG, TAG = {str(log)!r}, {tag!r}
        NS = os.stat("/proc/self/ns/net").st_ino
        def note(event):
            with open(LOG, "a") as f:
                f.write(json.dumps({{"event": event, "tag": TAG, "netns": NS, "pid": os.getpid(), "t": time.time()}}) + "\\n")
        note("start")
        with open(LOG) as f:
            starts = sum(1 for line in f if '"start"' in line and json.loads(line)["tag"] == TAG)
        if starts == 1 or not {first_only!r}:
            end = time.time() + {sleep!r}
            while time.time() < end or ({str(gate) if gate else ""!r} and not os.path.exists({str(gate) if gate else ""!r})):
                time.sleep({ALIVE_INTERVAL!r})
                note("alive")
        note("end")
        print("done:", TAG)
        """
    )


class Script:
    """turn 0: python_execute of the scenario's program; turn 1: terminate
    (held until `released` in the think scenario). A later run whose task
    holds a marker of `other_runs` gets that entry's turns instead."""

    def __init__(self, scenario: str, log: Path, tag: str, gate: Path) -> None:
        self.scenario = scenario
        self.tag = tag
        """The program's tag in the executions log."""
        self.released = threading.Event()
        self.other_runs: dict[str, list[Reply]] = {}
        if scenario == "tool":
            code = program(log, tag, TOOL_SLEEP_SECONDS, first_only=True)
        elif scenario == "between":
            code = program(log, tag, 0.0, first_only=True, gate=gate)
        else:
            code = program(log, tag, 0.0, first_only=True)
        self.turns: list[Reply] = [python(code), terminate(f"{tag} finished")]

    def __call__(self, body: dict, attempt: int) -> Reply:
        turn = turn_of(body)
        task = task_text(body)
        other = next((turns for marker, turns in self.other_runs.items() if marker in task), None)
        if other is not None:
            return other[min(turn, len(other) - 1)]
        reply = self.turns[min(turn, len(self.turns) - 1)]
        if self.scenario == "think" and turn == 1 and not self.released.is_set():
            reply = replace(reply, delay=HELD_THINK_SECONDS)
        return reply


def task_text(body: dict) -> str:
    """The user messages of a think request (the run's task is among them)."""
    messages = body.get("messages") or []
    return " ".join(json.dumps(m.get("content")) for m in messages if isinstance(m, dict) and m.get("role") == "user")


@dataclass
class Execution:
    role: str
    start: float
    last: float
    """Its end, or its last sign of life (a killed one): seconds from the cut."""
    ended: bool


@dataclass
class Attempt:
    activity: str
    attempt: int
    role: str
    seen: float
    """When the poll first saw it started (seconds from the cut)."""


@dataclass
class Measurement:
    scenario: str
    repeat: int
    finished: bool = False
    end: str = ""
    cut_to_done: float | None = None
    cut_to_b: float | None = None
    """tool: cut -> the call's program started on b; think: cut -> b's think request
    reached the fake; between: cut -> the next think's request from b."""
    attempts: int = 0
    """The attempt that completed the activity in flight at the cut (history)."""
    attempts_seen: list[Attempt] = field(default_factory=list)
    a_call_died_after: float | None = None
    """tool: cut -> a's execution's last sign of life."""
    executions: list[Execution] = field(default_factory=list)
    overlap: bool = False
    error_seen: str = ""
    """A tool observation the model got that reports a lost call."""
    workflow_task_timeouts: int = 0
    workflow_task_stall: float = 0.0
    """Seconds workflow tasks spent before they timed out (scheduled -> timed out), after the cut."""
    workflow_tasks_after_cut: list[str] = field(default_factory=list)
    thinks: list[str] = field(default_factory=list)
    """Each think request: 'turn<N>@<host>+<seconds from the cut>'."""
    rejoin: Rejoin | None = None
    """The heal scenario's follow-up (testkit/partition_heal.py)."""
    error: str = ""

    def line(self) -> str:
        def s(v: float | None) -> str:
            return "-" if v is None else f"{v:.1f}s"

        seen = ", ".join(f"{a.activity}#{a.attempt}@{a.role}{a.seen:+.1f}" for a in self.attempts_seen)
        return (
            f"{self.scenario:<7} #{self.repeat} {self.end or '-':<20} cut->b {s(self.cut_to_b):>6} "
            f"cut->done {s(self.cut_to_done):>6} attempts {self.attempts} [{seen}] "
            f"a's call died {s(self.a_call_died_after)} overlap {self.overlap} "
            f"error seen {self.error_seen or '-'!r} wft timeouts {self.workflow_task_timeouts} "
            f"(stall {self.workflow_task_stall:.1f}s: {'; '.join(self.workflow_tasks_after_cut)}) "
            f"thinks {' '.join(self.thinks)}" + (f" | {self.rejoin.line()}" if self.rejoin else "")
            + (f" ERROR {self.error}" if self.error else "")
        )

    def as_json(self) -> dict:
        return asdict(self)


@dataclass
class AfterTheRun:
    """What a scenario's follow-up gets: the cluster, with the partitioned run done and analysed."""

    cluster: NetnsCluster
    script: Script
    handle: WorkflowHandle
    result: AgentRunResult
    run_id: str
    log: Path
    cut_at: float
    m: Measurement


FollowUp = Callable[[AfterTheRun], Awaitable[None]]


async def start_run(cluster: NetnsCluster, run_id: str, task: str) -> WorkflowHandle:
    """An agent run on the cluster's queue, as the starter builds it (tool terms in)."""
    assert cluster.client is not None
    run = agent_run_input(task, agent="manus")
    return await cluster.client.start_workflow(
        "AgentWorkflow",
        run,
        id=run_id,
        task_queue=cluster.task_queue,
        task_timeout=run.continuation.workflow_task_timeout() if run.continuation else None,
        result_type=AgentRunResult,
    )


async def run_scenario(base_dir: Path, scenario: str, repeat: int, then: FollowUp | None = None) -> Measurement:
    """One run of `scenario` on a cluster of its own; then `then`, if given, on the same cluster."""
    m = Measurement(scenario, repeat)
    base_dir.mkdir(parents=True, exist_ok=True)
    log = base_dir / "executions.jsonl"
    run_id = f"partition-{scenario}-{repeat}-{uuid.uuid4().hex[:6]}"
    gate = base_dir / "go"
    script = Script(scenario, log, f"{run_id} 0", gate)
    async with NetnsCluster(base_dir, responder=script) as cluster:
        assert cluster.client is not None and cluster.fake is not None
        cluster.start_worker("a")
        handle = await start_run(cluster, run_id, f"partition test {run_id}")
        try:
            await _reach_cut_point(cluster, scenario, log)
            cluster.start_worker("b")
            await _wait_polling(cluster, "b")
            if scenario == "tool":
                await asyncio.sleep(CUT_AFTER_START_SECONDS)
            if scenario == "between":
                gate.touch()
                await wait_until(lambda: program_events(log, "end"), POINT_TIMEOUT_SECONDS, "the step's end", 0.01)
                client = cluster.client
                await wait_until(
                    lambda: completed_count(client, run_id, "python_execute"), POINT_TIMEOUT_SECONDS,
                    "the step's completion in the history", 0.01,
                )
            cut_at = cluster.cut("a")
            script.released.set()
            poll = asyncio.create_task(_poll_attempts(cluster, handle, cut_at, m))
            try:
                result = await asyncio.wait_for(final_result(handle), RUN_TIMEOUT_SECONDS)
            finally:
                poll.cancel()
            m.finished = (result.state, result.stop_reason) == (AgentState.FINISHED, StopReason.TERMINATED)
            m.end = f"{result.state.value}/{result.stop_reason.value}"
            await _analyse(cluster, run_id, log, cut_at, m)
            if then is not None:
                await then(AfterTheRun(cluster, script, handle, result, run_id, log, cut_at, m))
        except Exception as e:  # reported in the measurement; the test's assertions fail on it
            m.error = f"{type(e).__name__}: {e}"
            for role, child in cluster.workers.items():
                m.error += f"\n--- worker {role} stderr tail ---\n{child.stderr()[-1500:]}"
    return m


def program_events(log: Path, event: str) -> list[dict]:
    """The executions log's lines of one kind ("start", "alive", "end")."""
    if not log.exists():
        return []
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    return [e for e in lines if e["event"] == event]


async def _reach_cut_point(cluster: NetnsCluster, scenario: str, log: Path) -> None:
    a = cluster.workers["a"]

    def alive() -> None:
        if a.returncode is not None:
            raise RuntimeError(f"worker a exited early\n{a.describe()}")

    def started() -> bool:
        alive()
        return bool(program_events(log, "start"))

    def thinking() -> bool:
        alive()
        assert cluster.fake is not None
        return any(r.turn == 1 for r in list(cluster.fake.requests))

    if scenario == "think":
        await wait_until(thinking, POINT_TIMEOUT_SECONDS, "the think of turn 1", 0.02)
    else:
        await wait_until(started, POINT_TIMEOUT_SECONDS, "the tool to start", 0.02)


LISTED_WITHIN_SECONDS = 3.0
"""How long to wait for the server to list a worker that says it polls."""


async def _wait_polling(cluster: NetnsCluster, role: str) -> None:
    """Until the server lists `role`'s worker among the queue's pollers (workflow and activity tasks)."""
    from temporalio.api.enums.v1 import TaskQueueType
    from temporalio.api.taskqueue.v1 import TaskQueue
    from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest

    assert cluster.client is not None
    identity_prefix = f"{cluster.workers[role].pid}@"

    async def polling() -> bool:
        assert cluster.client is not None
        for kind in (TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW, TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY):
            answer = await cluster.client.workflow_service.describe_task_queue(
                DescribeTaskQueueRequest(
                    namespace="default", task_queue=TaskQueue(name=cluster.task_queue), task_queue_type=kind
                )
            )
            if not any(p.identity.startswith(identity_prefix) for p in answer.pollers):
                return False
        return True

    # The server lists a poller on the partition of the queue it polled, which the
    # root's describe may not show: the worker's own line that it polls is the
    # sure sign, the listing (or a second more) the server's.
    worker = cluster.workers[role]
    await wait_until(lambda: "worker polling task queue" in worker.stderr(), POINT_TIMEOUT_SECONDS, f"worker {role} to start", 0.05)
    try:
        await wait_until(polling, LISTED_WITHIN_SECONDS, f"worker {role} to be listed", 0.1)
    except TimeoutError:
        pass


def _role_of_identity(cluster: NetnsCluster, identity: str) -> str:
    pid = identity.split("@", 1)[0]
    return next((role for role, child in cluster.workers.items() if str(child.pid) == pid), identity or "?")


async def _poll_attempts(cluster: NetnsCluster, handle, cut_at: float, m: Measurement) -> None:
    """Record every (activity, attempt) the run's pending activities show started, and on which worker."""
    known: set[tuple[str, int, str]] = set()
    while True:
        try:
            pending = (await handle.describe()).raw_description.pending_activities
        except Exception:
            pending = []
        for p in pending:
            if p.state != PendingActivityState.PENDING_ACTIVITY_STATE_STARTED:
                continue
            key = (p.activity_type.name, p.attempt, p.last_worker_identity)
            if key not in known:
                known.add(key)
                role = _role_of_identity(cluster, p.last_worker_identity)
                m.attempts_seen.append(Attempt(p.activity_type.name, p.attempt, role, time.time() - cut_at))
        await asyncio.sleep(POLL_INTERVAL)


async def _analyse(cluster: NetnsCluster, run_id: str, log: Path, cut_at: float, m: Measurement) -> None:
    assert cluster.client is not None and cluster.fake is not None
    record = await read_history(cluster.client, run_id)
    if record.closed is not None:
        m.cut_to_done = record.closed - cut_at
    # tool: turn 0's python_execute; think, between: turn 1's think (the one in flight at the cut).
    hit, index = ("python_execute", 0) if m.scenario == "tool" else ("think", 1)
    hits = [a for a in record.activities if a.type == hit]
    if len(hits) > index:
        m.attempts = hits[index].attempt
    for scheduled, closed, how in record.workflow_tasks:
        if closed is not None and closed > cut_at:
            m.workflow_tasks_after_cut.append(f"{scheduled - cut_at:+.1f}..{closed - cut_at:+.1f} {how}")
            if how.startswith("timed out"):
                m.workflow_task_timeouts += 1
                m.workflow_task_stall += closed - max(scheduled, cut_at)

    # Executions of the program, per host, from its own log.
    by_pid: dict[int, Execution] = {}
    for e in program_events(log, "start") + program_events(log, "alive") + program_events(log, "end"):
        role = cluster.role_of_inode(e["netns"])
        ex = by_pid.setdefault(e["pid"], Execution(role, e["t"] - cut_at, e["t"] - cut_at, False))
        ex.start = min(ex.start, e["t"] - cut_at)
        ex.last = max(ex.last, e["t"] - cut_at)
        ex.ended = ex.ended or e["event"] == "end"
    m.executions = sorted(by_pid.values(), key=lambda x: x.start)
    for x in m.executions:
        for y in m.executions:
            if x is not y and x.start < y.start < x.last:
                m.overlap = True
    if m.scenario == "tool" and not any(x.role == "a" and x.start < 0 < x.last for x in m.executions):
        m.error = "a's execution was not running at the cut (b took too long to start?)"
    on_a = [x for x in m.executions if x.role == "a" and not x.ended]
    if m.scenario == "tool" and on_a:
        m.a_call_died_after = max(x.last for x in on_a)

    # Think requests: which host sent each, when.
    started_at = time.monotonic() - time.time()  # received_at is monotonic
    for r in list(cluster.fake.requests):
        host = cluster.role_of_address(r.peer)
        m.thinks.append(f"turn{r.turn}@{host}{r.received_at - started_at - cut_at:+.1f}")
    after = [r for r in list(cluster.fake.requests) if cluster.role_of_address(r.peer) == "b"]
    if m.scenario == "tool":
        on_b = [x for x in m.executions if x.role == "b"]
        m.cut_to_b = min((x.start for x in on_b), default=None)
    elif after:
        m.cut_to_b = min(r.received_at - started_at - cut_at for r in after)
    # What the model was told about the call.
    for r in list(cluster.fake.requests):
        for message in r.messages:
            content = message.get("content")
            text = content if isinstance(content, str) else json.dumps(content)
            if message.get("role") == "tool" and any(marker in text for marker in LOST_CALL_MARKERS):
                m.error_seen = text[:160]
