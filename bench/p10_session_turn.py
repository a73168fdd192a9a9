"""P10 session turns: what a follow-up costs, and whether history per turn stays flat.

(a) a new session's first turn: start_workflow -> turn 1 has ended (one step:
    prepare_workspace, one think whose reply answers).
(b) a follow-up's turn in an idle session: the send_message update -> that
    turn has ended (one step: one think).
Both are timed the same way (the session query polled every POLL seconds), and
the worker's CPU (this process: worker and client) is metered over each.
Pairs are interleaved a, b, a, b, ...; each figure is the median.

Then one session takes TURNS turns in one execution (no continue-as-new) and
the history bytes each turn adds are read from the server after each turn.
A turn's think names the memory window it sends against (16 bytes per
message), so a turn adds a little more until the window is full (100
messages, about 33 turns here); from there the bytes per turn must be flat:
the last 5 turns' mean against that of the 5 turns after the window filled,
target <= 1.05. Continue-as-new bounds each execution's total.
"""

from __future__ import annotations

import asyncio
import os
import time

from temporalio.client import Client, WorkflowHandle

from agent_model.run import AgentRunInput, AgentRunResult
from agent_model.session import SessionMessage, SessionTerms, SessionView
from bench.common import CpuMeter, Samples, bench_profile, bench_settings, log, ms, new_run_id, task_for, verdict
from bench.context import Context, Section
from runtime.worker_factory import build_worker
from workflows.agent import AgentWorkflow

POLL = 0.01
TERMS = SessionTerms(idle_seconds=3600)
FLAT_TARGET = 1.05
TURNS = 50
WINDOW_FULL_TURN = 36
"""From this turn on the manus profile's 100-message window is full (3 messages a turn)."""


async def turn_ended(handle: WorkflowHandle, turn: int) -> None:
    while True:
        try:
            view: SessionView | None = await handle.query(AgentWorkflow.session)
        except Exception:  # not started on a worker yet
            view = None
        if view is not None and view.idle and view.turn == turn and view.turns[-1].ended:
            return
        await asyncio.sleep(POLL)


async def start_session(client: Client, queue: str, max_steps: int = 1) -> WorkflowHandle:
    run_id = new_run_id("bench-p8")
    return await client.start_workflow(
        AgentWorkflow.run,
        AgentRunInput(task=task_for({"run": run_id}), profile=bench_profile(max_steps, []), session=TERMS),
        id=run_id, task_queue=queue, result_type=AgentRunResult, static_summary="benchmark session",
    )


async def history_bytes(handle: WorkflowHandle) -> int:
    return (await handle.describe()).raw_description.workflow_execution_info.history_size_bytes


async def measure_turns(ctx: Context, client: Client, queue: str, pairs: int) -> dict[str, Samples]:
    """Wall per turn of each kind; CPU summed over all of a kind (the clock
    ticks 10 ms, coarser than one turn) in cpu_a / cpu_b as one sample each."""
    out = {k: Samples() for k in ("a", "b", "cpu_a", "cpu_b")}
    cpu = {"a": 0.0, "b": 0.0}
    open_sessions = []
    for rep in range(pairs + 1):  # the first pair warms up
        meter = CpuMeter(worker=os.getpid()).start()
        began = time.perf_counter()
        handle = await start_session(client, queue)
        await turn_ended(handle, 1)
        wall_a, cpu_a = time.perf_counter() - began, meter.stop().used["worker"]
        open_sessions.append(handle)

        meter = CpuMeter(worker=os.getpid()).start()
        began = time.perf_counter()
        await handle.execute_update(AgentWorkflow.send_message, SessionMessage(text="and now the next thing"))
        await turn_ended(handle, 2)
        wall_b, cpu_b = time.perf_counter() - began, meter.stop().used["worker"]
        if rep:
            out["a"].add(wall_a)
            out["b"].add(wall_b)
            cpu["a"] += cpu_a
            cpu["b"] += cpu_b
            log(f"P10 pair {rep}/{pairs}: new run's turn {ms(wall_a)} ms, follow-up's turn {ms(wall_b)} ms")
    for handle in open_sessions:
        await handle.cancel()
    out["cpu_a"].add(cpu["a"] / pairs)
    out["cpu_b"].add(cpu["b"] / pairs)
    return out


async def measure_history(client: Client, queue: str, turns: int) -> list[int]:
    handle = await start_session(client, queue)
    await turn_ended(handle, 1)
    sizes = [await history_bytes(handle)]
    for turn in range(2, turns + 1):
        await handle.execute_update(AgentWorkflow.send_message, SessionMessage(text=f"message {turn}: go on"))
        await turn_ended(handle, turn)
        sizes.append(await history_bytes(handle))
    await handle.cancel()
    return [later - earlier for earlier, later in zip(sizes, sizes[1:])]


async def run(ctx: Context) -> Section:
    pairs = 10 if ctx.quick else 30
    turns = TURNS
    settings = bench_settings(ctx.fake.base_url, ctx.workspace("p8"))
    async with build_worker(ctx.client, settings):
        timing = await measure_turns(ctx, ctx.client, settings.task_queue, pairs)
        added = await measure_history(ctx.client, settings.task_queue, turns)
    a, b, cpu_a, cpu_b = (timing[k] for k in ("a", "b", "cpu_a", "cpu_b"))
    wall_ratio, cpu_ratio = b.median / a.median, cpu_b.median / cpu_a.median
    # added[i] is what turn i + 2 added.
    settled = added[WINDOW_FULL_TURN - 2 : WINDOW_FULL_TURN + 3]
    first, last = sum(settled) / len(settled), sum(added[-5:]) / 5
    flat = last / first
    section = Section("P10 session turns")
    section.markdown += [
        f"{pairs} pairs, interleaved; median (min-max). Each turn is one step whose think answers; the fake LLM "
        "has no latency, so this is the whole machinery of a turn.",
        "",
        "| turn | wall ms | worker CPU ms |",
        "|---|---|---|",
        f"| (a) a new session's first turn (start -> turn ended) | {a.spread(1000)} | {cpu_a.spread(1000)} |",
        f"| (b) a follow-up's turn (send_message -> turn ended) | {b.spread(1000)} | {cpu_b.spread(1000)} |",
        f"| (b)/(a) | **{wall_ratio:.2f}** | **{cpu_ratio:.2f}** |",
        "",
        "(CPU: the mean over all pairs of each kind; the process clock ticks 10 ms.)",
        "",
        f"History bytes each turn adds, one execution, {turns} turns: turn 2 {added[0]} B; turn "
        f"{WINDOW_FULL_TURN - 1} {added[WINDOW_FULL_TURN - 3]} B (the memory window fills: each message it holds "
        f"is named in the think's input); turns {WINDOW_FULL_TURN}-{WINDOW_FULL_TURN + 4} mean {first:.0f} B, "
        f"turns {turns - 4}-{turns} mean {last:.0f} B: ratio **{flat:.3f}** (target <= {FLAT_TARGET}: "
        f"**{verdict(flat, FLAT_TARGET)}**). Continue-as-new bounds each execution's total "
        "(tests/test_session_workflow.py runs 50 turns across it).",
    ]
    section.summary += [
        ("P10 follow-up turn / new run's turn, wall", f"{wall_ratio:.2f}", "-", "measured"),
        ("P10 follow-up turn / new run's turn, worker CPU", f"{cpu_ratio:.2f}", "-", "measured"),
        ("P10 history bytes per turn, window full, last/first", f"{flat:.3f}", f"<= {FLAT_TARGET}", verdict(flat, FLAT_TARGET)),
    ]
    return section
