"""Following a run from the terminal: one line per step, questions, the result."""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from typing import TextIO

from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.service import RPCError

from agent_model.flow import PlanningFlowResult
from agent_model.plan import Plan, StepStatus
from agent_model.run import AgentRunResult, AgentStatus, HumanAnswer, HumanQuestion, StepRecord

POLL_INTERVAL = 0.5
"""Seconds between status queries while following."""
CLEAR_LINE = "\r\x1b[K"
"""Carriage return and erase-line: redraws the progress line in place."""


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


async def read_line(stream: TextIO) -> str:
    """One line from `stream` without blocking the event loop.

    A daemon thread does the blocking read, so a run that ends while the user
    is still typing does not keep the process alive.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[str] = loop.create_future()

    def read() -> None:
        line = stream.readline()
        loop.call_soon_threadsafe(lambda: future.done() or future.set_result(line))

    threading.Thread(target=read, name="read-answer", daemon=True).start()
    return await future


async def ask_user(handle: WorkflowHandle, question: HumanQuestion, out: TextIO) -> None:
    while True:
        print(f"\n? The agent asks: {question.text}", file=out)
        print("> ", end="", file=out, flush=True)
        text = (await read_line(sys.stdin)).strip()
        if not text:
            print("(an empty answer is not accepted; type your answer)", file=out)
            continue
        try:
            await handle.execute_update("answer", HumanAnswer(question_id=question.id, text=text))
            return
        except (WorkflowUpdateFailedError, RPCError) as e:
            print(f"answer not accepted: {getattr(e, 'cause', None) or e}", file=out)
            return


class AgentProgress:
    """Prints one agent run's new steps and handles its questions, one poll at a time."""

    def __init__(self, handle: WorkflowHandle, out: TextIO, interactive: bool, indent: str = "") -> None:
        self.handle, self.out, self.interactive, self.indent = handle, out, interactive, indent
        self.printed = 0
        """Records printed; the next `steps` query asks from there."""
        self.last_step = 0
        self.max_steps = 0
        self.announced: str | None = None
        self.answering: asyncio.Task | None = None
        self.live = out.isatty()
        """On a terminal, a progress line is redrawn in place under the step lines."""
        self.step_started = time.monotonic()
        self.last_tool = ""

    def _print(self, text: str) -> None:
        prefix = CLEAR_LINE if self.live else ""
        print(f"{prefix}{self.indent}{text}", file=self.out, flush=True)

    def _progress(self, status: AgentStatus) -> None:
        if not self.live or self.answering is not None and not self.answering.done():
            return
        elapsed = time.monotonic() - self.step_started
        tool = f" · after {self.last_tool}" if self.last_tool else ""
        line = (
            f"{self.indent}… step {status.step}/{status.max_steps}{tool} · {elapsed:.0f} s · "
            f"{status.usage.total_tokens} tokens"
        )
        self.out.write(CLEAR_LINE + line)
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
        self.printed += len(new)
        self._progress(status)
        question = status.pending_question
        if question is not None and question.id != self.announced:
            self.announced = question.id
            if self.interactive:
                self.answering = asyncio.ensure_future(ask_user(self.handle, question, self.out))
            else:
                self._print(f"? waiting for an answer to question {question.id} of {self.handle.id}: {question.text}")

    def finish(self, result: AgentRunResult) -> None:
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
        if self.answering is not None and not self.answering.done():
            self.answering.cancel()
        self.clear_line()


class FlowProgress:
    """Prints a PlanningFlow's plan, each step's start and outcome, and the steps of
    the child run that is working."""

    def __init__(self, client: Client, handle: WorkflowHandle, out: TextIO, interactive: bool) -> None:
        self.client, self.handle, self.out, self.interactive = client, handle, out, interactive
        self.plan_shown = False
        self.statuses: dict[int, tuple[str, StepStatus]] = {}
        self.children: dict[str, AgentProgress] = {}

    def _print(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    async def poll(self) -> None:
        try:
            plan: Plan = await self.handle.query("plan", result_type=Plan)
        except RPCError:
            return
        self._show(plan)
        for step in plan.steps:
            if step.status == StepStatus.IN_PROGRESS and step.run_id:
                await self._child(step.run_id).poll()

    def _child(self, run_id: str) -> AgentProgress:
        if run_id not in self.children:
            handle = self.client.get_workflow_handle(run_id, result_type=AgentRunResult)
            self.children[run_id] = AgentProgress(handle, self.out, self.interactive, indent="    ")
        return self.children[run_id]

    def _show(self, plan: Plan) -> None:
        if not plan.steps:
            return
        if not self.plan_shown:
            self.plan_shown = True
            self._print(plan.render() + "\n")
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

    def finish(self, result: PlanningFlowResult) -> None:
        for child in self.children.values():
            child.clear_line()  # the flow's own lines do not erase a child's progress line
        self._show(result.plan)

    def close(self) -> None:
        for child in self.children.values():
            child.close()


async def _until_done(handle: WorkflowHandle, progress: AgentProgress | FlowProgress):
    result_task = asyncio.ensure_future(handle.result())
    try:
        while not result_task.done():
            await progress.poll()
            await asyncio.wait({result_task}, timeout=POLL_INTERVAL)
        result = result_task.result()
        progress.finish(result)  # prints what the last poll did not
    finally:
        progress.close()
        if not result_task.done():
            result_task.cancel()
    return result


async def follow(handle: WorkflowHandle, out: TextIO = sys.stdout, interactive: bool | None = None) -> AgentRunResult:
    """Print an agent run's steps as they happen; answer questions in a terminal."""
    interactive = sys.stdin.isatty() if interactive is None else interactive
    return await _until_done(handle, AgentProgress(handle, out, interactive))


async def follow_flow(
    client: Client, handle: WorkflowHandle, out: TextIO = sys.stdout, interactive: bool | None = None
) -> PlanningFlowResult:
    """Print a PlanningFlow's progress, with the steps of each child run."""
    interactive = sys.stdin.isatty() if interactive is None else interactive
    return await _until_done(handle, FlowProgress(client, handle, out, interactive))
