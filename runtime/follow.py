"""Following a run from the terminal: one line per step, questions, the result."""

from __future__ import annotations

import asyncio
import shutil
import sys
import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, Awaitable, Callable, TextIO

from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.workflowservice.v1 import DescribeWorkflowExecutionRequest, GetSystemInfoRequest
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.converter import DataConverter
from temporalio.service import RPCError

from agent_model.budget import spent_text
from agent_model.flow import PlanningFlowResult
from agent_model.plan import Plan, StepStatus
from agent_model.run import AgentRunResult, AgentStatus, HumanAnswer, HumanQuestion, StepRecord
from agent_model.run import resolved_profile
from agent_model.workspace_names import workspace_name_for
from runtime.approval_prompt import ask_approval
from runtime.cli import mute_temporal_logs
from runtime.connection import is_unreachable
from runtime.activity_notice import DoingNotices
from runtime.live_print import LiveThought, progress_with_thought
from runtime.retry_notice import RetryNotices
from runtime.run_control import ended_line, run_input_of
from runtime.run_result import ended_result
from runtime.task_queue import waits_for_worker
from runtime.terminal_text import inert
from runtime.tasks import let_go
from runtime.user_errors import RunEnded

POLL_INTERVAL = 0.5
"""Seconds between status queries while following."""
POLL_BUDGET = 5.0
"""Longest one round of status queries may take; a slow round is skipped."""
CHECK_INTERVAL = 1.0
"""Seconds between checks of the server and of the run's waiting tasks."""
CHECK_TIMEOUT = timedelta(seconds=3)
"""A check the server has not answered in this time counts as the server gone."""
STALL_SECONDS = 2.0
"""A task of the run untaken this long means no worker takes it."""
LOST_RETRY_SECONDS = 60.0
"""How long to wait for a server that stopped answering before giving up."""
CLEAR_LINE = "\r\x1b[K"
"""Carriage return and erase-line: redraws the progress line in place. With
the dim and reset around a streamed thought (runtime/live_print.py), the
only control sequences the starter prints; the run's own text goes through
`inert` first."""


def step_line(record: StepRecord, max_steps: int) -> str:
    head = f"[{record.step}/{max_steps}]"
    if not record.tool_calls:
        text = (record.thought or "").strip().replace("\n", " ")
        return f"{head} {text[:160]}" if text else f"{head} (empty reply)"
    parts = []
    for call in record.tool_calls:
        outcome = call.observation.strip().replace("\n", " ")
        mark = "✗" if call.error else "→"
        parts.append(f"{call.name} {mark} {outcome[:100]}")
    return f"{head} " + " | ".join(parts)


async def step_limit(handle: WorkflowHandle, converter: DataConverter | None) -> int | None:
    """The run's step limit, from its current execution's input (a run that
    ends before any status query was answered still numbers its steps
    `[n/limit]`), decoded with the client's `converter`; None when the input
    cannot be read (or no converter was given)."""
    if converter is None:
        return None
    try:
        async for event in handle.fetch_history_events(page_size=1):
            run = await run_input_of(converter, event.workflow_execution_started_event_attributes)
            return resolved_profile(run).max_steps
    except Exception:  # RPCError, an input of another shape, an unknown agent: the line falls back
        return None
    return None


async def run_directory(handle: WorkflowHandle, converter: DataConverter | None) -> str:
    """The run's directory name, which names its live journal: from its
    input (a flow's step runs work in the flow's), else its id's."""
    if converter is not None:
        try:
            async for event in handle.fetch_history_events(page_size=1):
                run = await run_input_of(converter, event.workflow_execution_started_event_attributes)
                if run.workspace:
                    return run.workspace
                break
        except Exception:  # noqa: BLE001 (RPCError, an input of another shape: the id's name, as the workflow's default)
            pass
    return workspace_name_for(handle.id)


async def read_line(stream: TextIO) -> str:
    """One line from `stream` without blocking the event loop.

    A daemon thread does the blocking read, so a run that ends while the user
    is still typing does not keep the process alive.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[str] = loop.create_future()

    def read() -> None:
        line = stream.readline()
        loop.call_soon_threadsafe(answer, line)

    def answer(line: str) -> None:
        if not future.done():
            future.set_result(line)

    threading.Thread(target=read, name="read-answer", daemon=True).start()
    return await future


async def ask_user(handle: WorkflowHandle, question: HumanQuestion, out: TextIO) -> None:
    while True:
        print(f"\n? The agent asks: {inert(question.text)}", file=out)
        print("> ", end="", file=out, flush=True)
        line = await read_line(sys.stdin)
        if not line:
            print(
                f"(no more input; answer later with: python starter.py answer {handle.id} \"...\")",
                file=out,
                flush=True,
            )
            return
        text = line.strip()
        if not text:
            print("(an empty answer is not accepted; type your answer)", file=out)
            continue
        try:
            await handle.execute_update("answer", HumanAnswer(question_id=question.id, text=text))
            return
        except (WorkflowUpdateFailedError, RPCError) as e:
            print(f"answer not accepted: {inert(getattr(e, 'cause', None) or e)}", file=out)
            return


class AgentProgress:
    """Prints one agent run's new steps and handles its questions, one poll at a time."""

    def __init__(
        self,
        handle: WorkflowHandle,
        out: TextIO,
        interactive: bool,
        indent: str = "",
        converter: DataConverter | None = None,
        live_root: Path | None = None,
    ) -> None:
        """`converter`: the client's, to read the run's input (its step limit) from history.
        `live_root`: the workspace root whose live journal shows the run's
        streamed thought on the progress line (a terminal only); None: not shown."""
        self.handle, self.out, self.interactive, self.indent = handle, out, interactive, indent
        self.converter = converter
        self.printed = 0
        """The last step printed; the next `steps` query asks from there."""
        self.last_step = 0
        self.max_steps = 0
        self.announced: str | None = None
        self.announced_call: str | None = None
        """The gated call last asked about."""
        self.answering: asyncio.Task | None = None
        self.live = out.isatty()
        """On a terminal, a progress line is redrawn in place under the step lines."""
        self.step_started = time.monotonic()
        self.last_tool = ""
        self.status: AgentStatus | None = None
        self.thought = (
            LiveThought(live_root, lambda: run_directory(handle, converter), self._redraw)
            if live_root is not None and self.live
            else None
        )

    def _print(self, text: str) -> None:
        prefix = CLEAR_LINE if self.live else ""
        print(f"{prefix}{self.indent}{inert(text)}", file=self.out, flush=True)

    def say(self, text: str) -> None:
        """A line about the run as a whole (not a step), over the progress line."""
        prefix = CLEAR_LINE if self.live else ""
        print(f"{prefix}{inert(text)}", file=self.out, flush=True)

    def watched(self) -> list[str]:
        return [self.handle.id]

    def _progress(self, status: AgentStatus) -> None:
        self.status = status
        if self.thought is not None:
            self.thought.start()
        self._redraw()

    def _redraw(self) -> None:
        status = self.status
        if status is None or not self.live or self.answering is not None and not self.answering.done():
            return
        elapsed = time.monotonic() - self.step_started
        tool = f" · after {self.last_tool}" if self.last_tool else ""
        line = (
            f"{self.indent}… step {status.step}/{status.max_steps}{tool} · {elapsed:.0f} s · "
            f"{spent_text(status.usage, status.cost)}"
        )
        thought = self.thought.shown_after(self.last_step) if self.thought is not None else ""
        self.out.write(CLEAR_LINE + progress_with_thought(line, thought, shutil.get_terminal_size().columns))
        self.out.flush()

    async def poll(self) -> None:
        try:
            status: AgentStatus = await self.handle.query("status", result_type=AgentStatus)
            new: list[StepRecord] = await self.handle.query("steps", self.printed, result_type=list[StepRecord])
        except RPCError:
            return  # no worker yet, or the run just closed
        self.max_steps = status.max_steps
        for record in new:
            self.last_step = record.step
            self._print(step_line(record, self.max_steps))
            self.step_started = time.monotonic()
            self.last_tool = record.tool_calls[-1].name if record.tool_calls else ""
        if new:
            self.printed = new[-1].step
        self._progress(status)
        gated = status.pending_approval
        if gated is not None and gated.id != self.announced_call:
            self.announced_call = gated.id
            if self.interactive:
                self.answering = asyncio.ensure_future(ask_approval(self.handle, gated, self.out, read_line))
            else:
                self._print(
                    f"? call {gated.id} of {self.handle.id} waits for approval ({gated.reason}): "
                    f"{gated.tool}({gated.arguments[:200]}); python starter.py approve|reject {self.handle.id} {gated.id}"
                )
        question = status.pending_question
        if question is not None and question.id != self.announced:
            self.announced = question.id
            if self.interactive:
                self.answering = asyncio.ensure_future(ask_user(self.handle, question, self.out))
            else:
                self._print(f"? waiting for an answer to question {question.id} of {self.handle.id}: {question.text}")

    async def finish(self, result: AgentRunResult) -> None:
        if not self.max_steps and any(record.step > self.last_step for record in result.steps):
            self.max_steps = await step_limit(self.handle, self.converter) or 0
        # By step number: a long run's result leaves its oldest records out.
        for record in result.steps:
            if record.step > self.last_step:
                self._print(step_line(record, self.max_steps or result.steps_taken))
                self.last_step = record.step

    def clear_line(self) -> None:
        """Erase the progress line, on a terminal."""
        if self.live:
            self.out.write(CLEAR_LINE)
            self.out.flush()

    def close(self) -> None:
        if self.answering is not None:
            let_go(self.answering)
        if self.thought is not None:
            self.thought.stop()
        self.clear_line()


class FlowProgress:
    """Prints a PlanningFlow's plan, each step's start and outcome, and the steps of
    the child run that is working."""

    def __init__(
        self, client: Client, handle: WorkflowHandle, out: TextIO, interactive: bool, live_root: Path | None = None
    ) -> None:
        self.client, self.handle, self.out, self.interactive = client, handle, out, interactive
        self.live_root = live_root
        self.plan_shown = False
        self.statuses: dict[int, tuple[str, StepStatus]] = {}
        self.children: dict[str, AgentProgress] = {}
        self.working: list[str] = []
        """The step runs in progress at the last poll."""

    def _print(self, text: str) -> None:
        self.clear_line()  # a step run's progress line, drawn without a newline
        print(inert(text), file=self.out, flush=True)

    def clear_line(self) -> None:
        for child in self.children.values():
            child.clear_line()

    def say(self, text: str) -> None:
        self._print(text)

    def watched(self) -> list[str]:
        return [self.handle.id, *self.working]

    async def poll(self) -> None:
        try:
            plan: Plan = await self.handle.query("plan", result_type=Plan)
        except RPCError:
            return
        self._show(plan)
        self.working = [s.run_id for s in plan.steps if s.status == StepStatus.IN_PROGRESS and s.run_id]
        for step in plan.steps:
            if step.status == StepStatus.IN_PROGRESS and step.run_id:
                await self._child(step.run_id).poll()

    def _child(self, run_id: str) -> AgentProgress:
        if run_id not in self.children:
            handle = self.client.get_workflow_handle(run_id, result_type=AgentRunResult)
            self.children[run_id] = AgentProgress(
                handle, self.out, self.interactive, "    ", self.client.data_converter, self.live_root
            )
        return self.children[run_id]

    def _show(self, plan: Plan) -> None:
        if not plan.steps:
            return
        if not self.plan_shown:
            self.plan_shown = True
            self._print(plan.render(first_number=1) + "\n")
        for index, step in enumerate(plan.steps):
            seen = self.statuses.get(index)
            if seen == (step.text, step.status):
                continue
            if seen is not None and seen[0] != step.text:
                self._print(f"plan revised: step {index + 1} is now: {step.text}")
            self.statuses[index] = (step.text, step.status)
            if step.status == StepStatus.IN_PROGRESS:
                self._print(f"step {index + 1} started ({step.executor}, run {step.run_id}): {step.text}")
            elif step.status in (StepStatus.COMPLETED, StepStatus.BLOCKED):
                notes = " ".join(step.notes.split())[:200]
                self._print(f"step {index + 1} {step.status.value}: {notes}")

    async def finish(self, result: PlanningFlowResult) -> None:
        self._show(result.plan)

    def close(self) -> None:
        for child in self.children.values():
            child.close()


class ServerLost(Exception):
    """The server stopped answering while a run was followed and did not come
    back in time; the run itself is safe in the server's database."""


@dataclass
class Stall:
    """What the starter makes of a run that no worker serves."""

    text: str
    """The line to print."""
    resolved: bool = False
    """True when the starter did something about it (it started a worker)."""


StallHandler = Callable[[str, float], Awaitable["Stall | None"]]
"""Called with the run id and the seconds its task has waited."""


class Watch:
    """Watches what the step lines cannot show: a server that stopped answering,
    and a run whose next task no worker takes."""

    def __init__(
        self,
        client: Client,
        on_stall: StallHandler,
        stall_seconds: float = STALL_SECONDS,
        lost_retry_seconds: float = LOST_RETRY_SECONDS,
    ) -> None:
        self.client, self.on_stall = client, on_stall
        self.stall_seconds, self.lost_retry_seconds = stall_seconds, lost_retry_seconds
        self.checked_at = float("-inf")
        self.stalled_since: float | None = None
        self.stall_told: Stall | None = None
        self.waiting = False
        """At the last check, the run had a task that no worker had taken."""
        self.retries = RetryNotices()
        self.doing = DoingNotices()

    @property
    def address(self) -> str:
        return self.client.service_client.config.target_host

    async def _describe(self, run_id: str):
        # No retries: a server that is gone has to show up here in seconds,
        # not after the client's own retries have run out.
        return await self.client.workflow_service.describe_workflow_execution(
            DescribeWorkflowExecutionRequest(namespace=self.client.namespace, execution=WorkflowExecution(workflow_id=run_id)),
            retry=False,
            timeout=CHECK_TIMEOUT,
        )

    async def check(self, progress: "AgentProgress | FlowProgress") -> None:
        """Raises an unreachable RPCError when the server does not answer."""
        now = time.monotonic()
        if now - self.checked_at < CHECK_INTERVAL:
            return
        self.checked_at = now
        waiting = None
        for run_id in progress.watched():
            try:
                description = await self._describe(run_id)
            except RPCError as e:
                if is_unreachable(e):
                    raise
                continue  # e.g. a step run not visible yet; the next check sees it
            retrying = await self.retries.line(run_id, description, self.client.data_converter)
            if retrying is not None:
                progress.say(retrying)
            for line in await self.doing.lines(run_id, description, self.client.data_converter):
                progress.say(line)
            if waits_for_worker(description):
                waiting = waiting or run_id
        self.waiting = waiting is not None
        if waiting is None:
            if self.stall_told is not None and not self.stall_told.resolved:
                progress.say("a worker has taken the run's task; following on")
            self.stalled_since, self.stall_told = None, None
            return
        if self.stalled_since is None:
            self.stalled_since = now
        waited = now - self.stalled_since
        if self.stall_told is None and waited >= self.stall_seconds:
            self.stall_told = await self.on_stall(waiting, waited) or Stall("", resolved=True)
            if self.stall_told.text:
                progress.say(self.stall_told.text)

    async def _answers(self) -> bool:
        try:
            await self.client.workflow_service.get_system_info(GetSystemInfoRequest(), retry=False, timeout=CHECK_TIMEOUT)
            return True
        except RPCError:
            return False

    async def wait_for_server(self, run_id: str, progress: "AgentProgress | FlowProgress") -> None:
        """Say once that the server is gone, then wait quietly for it to answer
        again; raises ServerLost when it has not within lost_retry_seconds."""
        progress.clear_line()
        print(
            f"starter: lost the Temporal server at {self.address}; the run is safe, re-attach with "
            f"`python starter.py attach {run_id}` (retrying for {self.lost_retry_seconds:.0f} s)",
            file=sys.stderr,
            flush=True,
        )
        mute_temporal_logs(True)
        deadline = time.monotonic() + self.lost_retry_seconds
        while time.monotonic() < deadline:
            await asyncio.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
            if await self._answers():
                mute_temporal_logs(False)
                progress.say(f"reconnected to the Temporal server at {self.address}; following on")
                self.checked_at = float("-inf")
                return
        raise ServerLost(f"the Temporal server at {self.address} did not come back within {self.lost_retry_seconds:.0f} s")


async def _poll(progress: AgentProgress | FlowProgress, watch: Watch | None) -> None:
    if watch is not None and watch.waiting:
        return  # no worker would answer the queries
    try:
        await asyncio.wait_for(progress.poll(), POLL_BUDGET)
    except asyncio.TimeoutError:
        pass


async def _until_done(handle: WorkflowHandle, progress: AgentProgress | FlowProgress, watch: Watch | None = None):
    try:
        while True:
            kind = PlanningFlowResult if isinstance(progress, FlowProgress) else AgentRunResult
            result_task: asyncio.Future[Any] = asyncio.ensure_future(ended_result(handle, kind))
            try:
                while not result_task.done():
                    if watch is not None:
                        await watch.check(progress)
                    await _poll(progress, watch)
                    await asyncio.wait({result_task}, timeout=POLL_INTERVAL)
                result = result_task.result()
            except RPCError as e:
                if watch is None or not is_unreachable(e):
                    raise
                await watch.wait_for_server(handle.id, progress)
                continue
            except WorkflowFailureError as e:
                client = watch.client if watch is not None else None
                if client is None:
                    raise RunEnded(f"run {handle.id} ended without a result: {e.cause or e}") from None
                raise RunEnded(await ended_line(client, handle.id, e)) from None
            finally:
                # Also when it is done: it may have failed while the server was
                # waited for, and then no one would read its error.
                let_go(result_task)
            await progress.finish(result)  # prints what the last poll did not
            return result
    finally:
        progress.close()


async def follow(
    handle: WorkflowHandle,
    out: TextIO = sys.stdout,
    interactive: bool | None = None,
    watch: Watch | None = None,
    live_root: Path | None = None,
) -> AgentRunResult:
    """Print an agent run's steps as they happen; answer questions in a terminal.
    A run that ends without a result raises RunEnded; with a `watch`, a server
    that stops answering for good raises ServerLost. `live_root`: the
    workspace root whose journal shows the streamed thought (a terminal only)."""
    interactive = sys.stdin.isatty() if interactive is None else interactive
    converter = watch.client.data_converter if watch is not None else None
    progress = AgentProgress(handle, out, interactive, converter=converter, live_root=live_root)
    return await _until_done(handle, progress, watch)


async def follow_flow(
    client: Client,
    handle: WorkflowHandle,
    out: TextIO = sys.stdout,
    interactive: bool | None = None,
    watch: Watch | None = None,
    live_root: Path | None = None,
) -> PlanningFlowResult:
    """Print a PlanningFlow's progress, with the steps of each child run."""
    interactive = sys.stdin.isatty() if interactive is None else interactive
    return await _until_done(handle, FlowProgress(client, handle, out, interactive, live_root), watch)
