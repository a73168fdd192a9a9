"""P16 cold replay: how long a worker that takes a run over spends replaying
its execution, against the workflow task timeout it must finish within.

A worker that was not running a run (its worker died or was cut off) gets
the run's whole execution in its first workflow task and replays it. One
run of STEPS editor steps is recorded, then replayed REPLAYS times with the
worker's sandboxed runner (tests/record_history.py replayer); the time per
event, times the events after which a run continues as new
(agent_model/continuation.py), is the longest such task. It must stay well
inside a new run's workflow task timeout, or a run near the threshold could
never be taken over.
"""

from __future__ import annotations

import statistics
import time

from agent_model.continuation import HISTORY_EVENTS_PER_RUN, WORKFLOW_TASK_SECONDS
from agent_model.workspace_names import workspace_name_for
from bench.common import bench_profile, bench_settings, log, new_run_id, start_agent, verdict
from bench.context import Context, Section
from bench.peers.legs import NOTES_TEXT, TOOL, VIEW_ARGS
from runtime.worker_factory import build_worker
from tests.record_history import replayer

STEPS, QUICK_STEPS = 300, 100
REPLAYS = 3
WORKFLOW_TASK_TIMEOUT = WORKFLOW_TASK_SECONDS or 10.0
"""A new run's (agent_model/continuation.py; None: the server's 10 s)."""
TARGET = 0.5
"""A cold replay at the threshold takes at most half the timeout: room for a loaded worker."""


async def run(ctx: Context) -> Section:
    section = Section("P16")
    steps = QUICK_STEPS if ctx.quick else STEPS
    settings = bench_settings(ctx.fake.base_url, ctx.workspace("p16"))
    run_id = new_run_id("bench-p16")
    directory = settings.workspace_root / workspace_name_for(run_id)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "notes.txt").write_text(NOTES_TEXT)
    async with build_worker(ctx.client, settings):
        handle = await start_agent(
            ctx.client, settings, bench_profile(steps + 1, [TOOL]), {"tool": TOOL, "args": VIEW_ARGS, "turns": steps},
            run_id=run_id,
        )
        await handle.result()
    history = await handle.fetch_history()
    seconds = []
    for _ in range(REPLAYS):
        began = time.perf_counter()
        await replayer().replay_workflow(history)
        seconds.append(time.perf_counter() - began)
    per_event = statistics.median(seconds) / len(history.events)
    at_threshold = per_event * HISTORY_EVENTS_PER_RUN
    ratio = at_threshold / WORKFLOW_TASK_TIMEOUT
    log(f"P16: {len(history.events)} events replayed in {statistics.median(seconds):.2f} s")
    section.markdown += [
        "## P16 cold replay",
        "",
        f"One run of {steps} editor steps ({len(history.events)} events), replayed {REPLAYS} times with the "
        f"worker's sandboxed runner: {', '.join(f'{s:.2f}' for s in seconds)} s, "
        f"{per_event * 1000:.2f} ms an event. At the continue-as-new threshold ({HISTORY_EVENTS_PER_RUN:,} events) "
        f"a worker taking a run over spends ~{at_threshold:.1f} s in one workflow task, "
        f"{ratio:.2f}x the {WORKFLOW_TASK_TIMEOUT:g} s workflow task timeout.",
    ]
    section.summary += [
        (f"P16 cold replay at {HISTORY_EVENTS_PER_RUN:,} events / workflow task timeout", f"{ratio:.2f}",
         f"<= {TARGET}", verdict(ratio, TARGET)),
    ]
    return section
