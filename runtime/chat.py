"""`python starter.py chat`: talk to an agent run, turn by turn (docs/sessions.md).

`chat ID "message"` sends one follow-up and follows it to its answer; `chat`
in a terminal opens a session (asks for the task, then for the next message
after each answer, as OpenManus's prompt loop does); `chat ID` in a terminal
is that loop on an existing run. The loop reads its lines from a stream it is
given, so a test can feed it.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import TextIO

from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.service import RPCError

from agent_model.outcome_words import agent_outcome, ending_outcome
from agent_model.run import AgentRunResult
from agent_model.session import SessionView, TurnRecord, idle_text
from config.settings import Settings
from runtime.follow import POLL_BUDGET, POLL_INTERVAL, AgentProgress, Watch, read_line
from runtime import run_control
from runtime.web_ui_link import run_link
from runtime.follow_up import Delivery, agent_handle, check_message, deliver, refuse_non_target
from runtime.run_control import ended_line
from runtime.run_result import ended_result
from runtime.run_start import check_task_fits, start_agent_run
from runtime.tasks import let_go
from runtime.terminal_text import inert, print_ending
from runtime.user_errors import RunControlError, RunEnded

END_WORDS = ("exit", "quit")
"""A line that ends the loop (as do an empty line and the end of input)."""
TASK_PROMPT = "Enter your task: "
MESSAGE_PROMPT = "you> "


async def session_view(handle: WorkflowHandle) -> SessionView | None:
    try:
        return await handle.query("session", result_type=SessionView, rpc_timeout=timedelta(seconds=POLL_BUDGET))
    except RPCError:
        return None  # no worker yet, or the execution just closed


def turn_in(turns: list[TurnRecord], turn: int) -> TurnRecord | None:
    return next((t for t in turns if t.turn == turn), None)


async def follow_turn(
    client: Client, handle: WorkflowHandle, turn: int, out: TextIO, watch: Watch | None, interactive: bool
) -> TurnRecord | AgentRunResult:
    """Print turn `turn`'s steps until it has ended (its record), or until the
    run closes (its result); questions and gated calls are asked in a terminal."""
    progress = AgentProgress(handle, out, interactive, converter=client.data_converter)
    began = False
    result_task = asyncio.ensure_future(ended_result(handle, AgentRunResult))
    try:
        while True:
            if watch is not None:
                await watch.check(progress)
            view = None if watch is not None and watch.waiting else await session_view(handle)
            record = turn_in(view.turns, turn) if view is not None else None
            if record is not None and not began:
                progress.printed = progress.last_step = record.first_step - 1
                began = True
            if began:
                try:
                    await asyncio.wait_for(progress.poll(), POLL_BUDGET)
                except asyncio.TimeoutError:
                    pass
            if record is not None and record.ended:
                return record
            await asyncio.wait({result_task}, timeout=POLL_INTERVAL)
            if result_task.done():
                try:
                    result: AgentRunResult = result_task.result()
                except WorkflowFailureError as e:
                    raise RunEnded(await ended_line(client, handle.id, e)) from None
                if began:
                    await progress.finish(result)
                return turn_in(result.turns, turn) or result
    finally:
        let_go(result_task)
        progress.close()


def report_turn(outcome: TurnRecord | AgentRunResult, run_id: str, out: TextIO) -> bool:
    """Print how the turn ended; True when it finished its task."""
    if isinstance(outcome, AgentRunResult):
        print_ending(f"run {run_id}: {agent_outcome(outcome).sentence()}", outcome.note, outcome.final_answer, out)
        return outcome.succeeded
    assert outcome.state is not None and outcome.stop_reason is not None
    if not outcome.last_step or outcome.last_step < outcome.first_step:
        steps = "no step"
    elif outcome.last_step == outcome.first_step:
        steps = f"step {outcome.first_step}"
    else:
        steps = f"steps {outcome.first_step}-{outcome.last_step}"
    headline = f"turn {outcome.turn}: {ending_outcome(outcome.state, outcome.stop_reason).sentence()} ({steps})"
    print_ending(headline, outcome.note, outcome.answer, out)
    return outcome.stop_reason.succeeded


def come_back_line(run_id: str, settings: Settings) -> str:
    minutes = idle_text(settings.session.terms().idle_seconds)
    return (
        f'the session stays open for {minutes} after its last turn; come back with: python starter.py chat {run_id} "..."'
        f" (or later: the run goes on from where it ended)"
    )


async def send_and_follow(
    client: Client, settings: Settings, run_id: str, text: str, out: TextIO, watch: Watch | None, interactive: bool
) -> bool:
    """One follow-up, followed to its answer; True when the turn finished its task."""
    delivery: Delivery = await deliver(client, settings, run_id, text, out)
    print(inert(f"{run_id}: {delivery.reply}"), file=out, flush=True)
    outcome = await follow_turn(client, delivery.handle, delivery.turn, out, watch, interactive)
    return report_turn(outcome, run_id, out)


async def ask(prompt: str, lines: TextIO, out: TextIO) -> str | None:
    """The next line typed; None when the loop ends (empty line, end of input, exit)."""
    print(prompt, end="", file=out, flush=True)
    line = await read_line(lines)
    text = line.strip()
    if not text or text.lower() in END_WORDS:
        return None
    return text


async def conversation(
    client: Client,
    settings: Settings,
    run_id: str | None,
    lines: TextIO,
    out: TextIO,
    watch: Watch | None = None,
    new_run: dict | None = None,
) -> int:
    """The prompt loop: ask for the task (no `run_id`: a new session started
    with `new_run`'s options), follow each turn, ask for the next message."""
    if run_id is not None:
        refuse_non_target(await run_control.describe(client, run_id), run_id)
    else:
        task = await ask(TASK_PROMPT, lines, out)
        if task is None:
            print("no task given; nothing started", file=out)
            return 0
        options = dict(new_run or {})
        check_message(task, settings.session.terms())
        check_task_fits(settings, task, (options.get("agent", "manus"),), options.get("llm"))
        handle = await start_agent_run(client, settings, task, session=settings.session.terms(), **options)
        run_id = handle.id
        print(f"session {run_id}\nWeb UI: {await run_link(client, handle)}", file=out, flush=True)
        outcome = await follow_turn(client, agent_handle(client, run_id), 1, out, watch, interactive=True)
        report_turn(outcome, run_id, out)
        if isinstance(outcome, AgentRunResult):
            return 0 if outcome.succeeded else 1
    while (text := await ask(MESSAGE_PROMPT, lines, out)) is not None:
        try:
            await send_and_follow(client, settings, run_id, text, out, watch, interactive=True)
        except RunControlError as e:
            print(inert(f"not sent: {e}"), file=out)
    print(come_back_line(run_id, settings), file=out)
    return 0
