"""Following a run from the terminal: one line per step, questions, the result."""

from __future__ import annotations

import asyncio
import sys
import threading
from typing import TextIO

from temporalio.client import WorkflowHandle, WorkflowUpdateFailedError
from temporalio.service import RPCError

from agent_model.run import AgentRunResult, AgentStatus, HumanAnswer, HumanQuestion, StepRecord

POLL_INTERVAL = 0.5
"""Seconds between status queries while following."""


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


async def follow(handle: WorkflowHandle, out: TextIO = sys.stdout, interactive: bool | None = None) -> AgentRunResult:
    """Print the run's steps as they happen; answer questions in a terminal."""
    if interactive is None:
        interactive = sys.stdin.isatty()
    result_task = asyncio.ensure_future(handle.result())
    printed = 0
    max_steps = 0
    announced: str | None = None
    answering: asyncio.Task | None = None
    try:
        while not result_task.done():
            try:
                status: AgentStatus = await handle.query("status", result_type=AgentStatus)
                new: list[StepRecord] = await handle.query("steps", printed, result_type=list[StepRecord])
            except RPCError:
                new, status = [], None  # no worker yet, or the run just closed
            if status is not None:
                max_steps = status.max_steps
                for record in new:
                    print(step_line(record, max_steps), file=out, flush=True)
                printed += len(new)
                question = status.pending_question
                if question is not None and question.id != announced:
                    announced = question.id
                    if interactive:
                        answering = asyncio.ensure_future(ask_user(handle, question, out))
                    else:
                        print(f"? waiting for an answer to question {question.id}: {question.text}", file=out, flush=True)
            await asyncio.wait({result_task}, timeout=POLL_INTERVAL)
        result = result_task.result()
    finally:
        if answering is not None and not answering.done():
            answering.cancel()
        if not result_task.done():
            result_task.cancel()
    for record in result.steps[printed:]:
        print(step_line(record, max_steps or result.steps_taken), file=out, flush=True)
    return result
