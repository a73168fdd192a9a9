"""P7 MCP flood: how much an MCP server that floods the worker slows the other
runs on that worker.

An ordinary run (P1's (b): a str_replace_editor view of a small file per
step, fake LLM without latency) is timed on a worker in this process, alone
and while a hostile stdio MCP server (testkit/hostile_mcp.py), connected
through the worker's MCP code in the same process and event loop, writes to
it as fast as its pipe takes: `storm` (tools/list_changed notifications) or
`babble` (lines that are not JSON-RPC). Each flood has a server of its own,
stopped after its run. Rounds are interleaved: alone, storm, babble, ...
Target: the run's wall time under either flood is at most 1.3x its time alone
(the worker reads what a server sends unasked at a bounded rate,
activities/mcp/limits.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time

from activities.mcp.pool import McpPool
from agent_model.workspace_names import workspace_name_for
from testkit.run_results import final_result
from bench.common import Samples, bench_profile, bench_settings, check_result, log, new_run_id, start_agent, verdict
from bench.context import Context, Section
from bench.p1_step_overhead import NOTES, NOTES_TEXT, TOOL, VIEW_ARGS
from config.mcp_config import McpServerSettings
from runtime.worker_factory import build_worker
from testkit.hostile_mcp import HOSTILE_STDIO_ARGS

STEPS, QUICK_STEPS = 30, 10
ROUNDS, QUICK_ROUNDS = 3, 2
TARGET = 1.3
FLOODS = ("storm", "babble")
SERVER = "flood"
FLOOD_START_SECONDS = 1.0
"""Before the run: the flood is under way (and past the throttle's burst)."""


async def timed_run(ctx: Context, settings, steps: int) -> float:
    run_id = new_run_id("bench-p7")
    run_dir = settings.workspace_root / workspace_name_for(run_id)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / NOTES).write_text(NOTES_TEXT)
    began = time.perf_counter()
    handle = await start_agent(ctx.client, settings, bench_profile(steps, [TOOL]), {"tool": TOOL, "args": VIEW_ARGS}, run_id)
    result = await final_result(handle)
    took = time.perf_counter() - began
    check_result(result, steps, "P7 ordinary run")
    return took


async def flooded_run(ctx: Context, settings, steps: int, flood: str) -> float:
    server = McpServerSettings(kind="stdio", command=sys.executable, args=tuple(HOSTILE_STDIO_ARGS))
    pool = McpPool({SERVER: server})
    await pool.list_tools(SERVER)
    call = asyncio.create_task(pool.call_tool(SERVER, flood, {"count": 10**9}, 3600))
    try:
        await asyncio.sleep(FLOOD_START_SECONDS)
        return await timed_run(ctx, settings, steps)
    finally:
        call.cancel()
        with contextlib.suppress(BaseException):
            await call
        await pool.close_all()


async def run(ctx: Context) -> Section:
    section = Section("P7")
    steps = QUICK_STEPS if ctx.quick else STEPS
    rounds = QUICK_ROUNDS if ctx.quick else ROUNDS
    settings = bench_settings(ctx.fake.base_url, ctx.workspace("p7"))
    alone, flooded = Samples(), {flood: Samples() for flood in FLOODS}
    async with build_worker(ctx.client, settings):
        for i in range(rounds):
            log(f"P7 round {i + 1}/{rounds}: an ordinary run of {steps} steps alone, then during each flood")
            alone.add(await timed_run(ctx, settings, steps))
            for flood in FLOODS:
                flooded[flood].add(await flooded_run(ctx, settings, steps, flood))

    md = section.markdown
    md += [
        "## P7 MCP flood",
        "",
        f"{rounds} rounds; each an ordinary run of {steps} steps (a str_replace_editor view per step, fake LLM "
        "without latency) on a worker alone, then while an MCP server of that worker floods it.",
        "",
        "| | run wall time | / alone |",
        "|---|---|---|",
        f"| alone | {alone.spread(1000, '{:.0f}')} ms | 1.00 |",
    ]
    for flood, samples in flooded.items():
        ratio = samples.median / alone.median
        md.append(f"| during `{flood}` | {samples.spread(1000, '{:.0f}')} ms | {ratio:.2f} |")
        section.summary.append((f"P7 run during an MCP {flood} / alone", f"{ratio:.2f}", f"<= {TARGET}", verdict(ratio, TARGET)))
    return section
