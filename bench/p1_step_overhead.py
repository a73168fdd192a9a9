"""P1 step overhead: what one durable step costs on top of a bare Temporal loop
and on top of the same loop without Temporal.

(a) bare Temporal loop (bench/bare.py): prepare + 2 echo activities per step.
(b) durable-manus AgentWorkflow, fake LLM, one str_replace_editor `view` of a
    small file per step (the cheapest real tool: no child process).
(c) the same think/act loop in-process (bench/inproc.py), no Temporal.

Part 1, no LLM latency: ms/step of (a), (b), (c); target (b)/(a) <= 1.3.
Part 2, 1 s LLM latency: wall of (b) / wall of (c); target <= 1.05.
Runs are interleaved a, b, c, a, b, c, ... and each figure is the median.
The targets are judged with the worker's defaults (workflow code in Temporal's
sandbox); everything is then measured again with `[worker] workflow_sandbox =
false` for both Temporal loops, to show what the sandbox costs.
"""

from __future__ import annotations

import time
import uuid

from temporalio.client import Client

from agent_model.workspace_names import workspace_name_for
from testkit.run_results import final_result
from bench.bare import BareLoopWorkflow, bare_worker
from temporalio.worker import UnsandboxedWorkflowRunner

from bench.common import (
    Samples,
    history_breakdown,
    bench_profile,
    bench_settings,
    check_result,
    log,
    ms,
    new_run_id,
    start_agent,
    task_for,
    verdict,
)
from bench.context import Context, Section
from bench.inproc import InProcessAgent
from runtime.worker_factory import build_worker

TOOL = "str_replace_editor"
NOTES = "notes.txt"
NOTES_TEXT = "".join(f"line {i}: a small file for the benchmark's view calls\n" for i in range(1, 6))
VIEW_ARGS = {"command": "view", "path": NOTES}

STEP_TARGET = 1.3
LATENCY_TARGET = 1.05


class P1:
    def __init__(self, ctx: Context, client: Client, name: str, workflow_sandbox: bool) -> None:
        self.ctx = ctx
        self.client = client
        self.root = ctx.workspace(name)
        self.settings = bench_settings(ctx.fake.base_url, self.root).model_copy(
            update={"workflow_sandbox": workflow_sandbox}
        )
        self.bare_queue = f"bench-bare-{uuid.uuid4().hex[:8]}"
        self.inproc = InProcessAgent(self.settings)
        self.last: dict[str, object] = {}
        """The last handle of each kind of Temporal run, for the breakdown."""

    def _seed(self, workspace: str) -> None:
        directory = self.root / workspace
        directory.mkdir(parents=True, exist_ok=True)
        (directory / NOTES).write_text(NOTES_TEXT)

    async def bare(self, steps: int) -> float:
        began = time.perf_counter()
        handle = await self.client.start_workflow(
            BareLoopWorkflow.run, steps, id=new_run_id("bench-bare"), task_queue=self.bare_queue
        )
        assert await handle.result() == steps
        elapsed = time.perf_counter() - began
        self.last["a"] = handle
        return elapsed

    async def agent(self, steps: int, delay: float) -> float:
        run_id = new_run_id("bench-p1")
        self._seed(workspace_name_for(run_id))
        began = time.perf_counter()
        handle = await start_agent(
            self.client, self.settings, bench_profile(steps, [TOOL]),
            {"tool": TOOL, "args": VIEW_ARGS, "delay": delay}, run_id=run_id,
        )
        result = await final_result(handle)
        elapsed = time.perf_counter() - began
        check_result(result, steps, "P1 agent run")
        if delay == 0:
            self.last["b"] = handle
        return elapsed

    async def in_process(self, steps: int, delay: float) -> float:
        workspace = new_run_id("inproc")
        self._seed(workspace)
        script = {"tool": TOOL, "args": VIEW_ARGS, "delay": delay, "run": workspace}
        began = time.perf_counter()
        taken = await self.inproc.run(task_for(script), bench_profile(steps, [TOOL]), workspace)
        elapsed = time.perf_counter() - began
        assert taken == steps, taken
        return elapsed


async def measure(ctx: Context, client: Client, name: str, workflow_sandbox: bool) -> dict[str, Samples]:
    steps = 20 if ctx.quick else 50
    reps = 3 if ctx.quick else 5
    latency_steps = 5 if ctx.quick else 10
    latency_reps = 2 if ctx.quick else 3
    p = P1(ctx, client, name, workflow_sandbox)
    out = {k: Samples() for k in ("a", "b", "c", "lb", "lc")}
    bare_options = {} if workflow_sandbox else {"workflow_runner": UnsandboxedWorkflowRunner()}
    async with build_worker(client, p.settings), bare_worker(client, p.bare_queue, **bare_options):
        log(f"P1 [{name}] warm-up (3 steps each)")
        await p.bare(3)
        await p.agent(3, 0.0)
        await p.in_process(3, 0.0)
        for rep in range(reps):
            out["a"].add(await p.bare(steps) / steps)
            out["b"].add(await p.agent(steps, 0.0) / steps)
            out["c"].add(await p.in_process(steps, 0.0) / steps)
            log(f"P1 [{name}] rep {rep + 1}/{reps}: bare {ms(out['a'].values[-1])} ms/step, "
                f"agent {ms(out['b'].values[-1])}, in-process {ms(out['c'].values[-1])}")
        for rep in range(latency_reps):
            out["lb"].add(await p.agent(latency_steps, 1.0))
            out["lc"].add(await p.in_process(latency_steps, 1.0))
            log(f"P1 [{name}] 1 s latency rep {rep + 1}/{latency_reps}: agent {out['lb'].values[-1]:.2f} s, "
                f"in-process {out['lc'].values[-1]:.2f} s")
    out["steps"], out["latency_steps"] = steps, latency_steps
    out["breakdown"] = {k: history_breakdown(await h.fetch_history()) for k, h in p.last.items()}
    return out


def breakdown_table(main: dict, tuned: dict) -> list[str]:
    names = []
    for result in (main, tuned):
        for loop in ("a", "b"):
            names += [n for n in result["breakdown"][loop] if n not in names]

    def cell(result: dict, loop: str, name: str) -> str:
        value = result["breakdown"][loop].get(name)
        return "" if value is None else f"{value:.1f}"

    return [
        "| median ms (server event times) | (a) sandboxed | (b) sandboxed | (a) sandbox off | (b) sandbox off |",
        "|---|---|---|---|---|",
        *[
            f"| {name} | {cell(main, 'a', name)} | {cell(main, 'b', name)} | "
            f"{cell(tuned, 'a', name)} | {cell(tuned, 'b', name)} |"
            for name in names
        ],
    ]


async def run(ctx: Context) -> Section:
    main = await measure(ctx, ctx.client, "p1", workflow_sandbox=True)
    # The same with workflow code outside Temporal's sandbox, for both loops.
    tuned = await measure(ctx, ctx.client, "p1-no-sandbox", workflow_sandbox=False)

    steps, latency_steps = main["steps"], main["latency_steps"]
    a, b, c, lb, lc = (main[k] for k in ("a", "b", "c", "lb", "lc"))
    step_ratio = b.median / a.median
    latency_ratio = lb.median / lc.median
    per_step_extra = (lb.median - lc.median) / latency_steps
    t_ratio = tuned["b"].median / tuned["a"].median
    t_latency = tuned["lb"].median / tuned["lc"].median
    section = Section("P1 step overhead")
    section.markdown += [
        f"{steps}-step runs, no LLM latency, {len(a.values)} runs of each, interleaved; median (min-max). "
        "The dev server runs exactly as `runtime/embedded_server.py` starts it (SQLite file). \"sandboxed\" is "
        "the worker's default; \"sandbox off\" is `[worker] workflow_sandbox = false` (and the bare loop "
        "on Temporal's UnsandboxedWorkflowRunner too).",
        "",
        "| loop | ms/step, sandboxed (default) | ms/step, sandbox off |",
        "|---|---|---|",
        f"| (a) bare Temporal loop: 2 echo activities/step | {a.spread(1000)} | {tuned['a'].spread(1000)} |",
        f"| (b) durable-manus AgentWorkflow: think + `{TOOL} view` | {b.spread(1000)} | {tuned['b'].spread(1000)} |",
        f"| (c) same loop in-process, no Temporal | {c.spread(1000)} | {tuned['c'].spread(1000)} |",
        f"| (b)/(a) | **{step_ratio:.2f}** | {t_ratio:.2f} |",
        "",
        f"Target (b)/(a) <= {STEP_TARGET} with the defaults: **{verdict(step_ratio, STEP_TARGET)}**. "
        f"(b)-(c) = {ms(b.median - c.median)} ms/step is what durability costs per step, "
        f"{ms(tuned['b'].median - tuned['c'].median)} ms with the sandbox off.",
        "",
        "Where a step's time goes, from the history of the last run of each loop (a step is two workflow "
        "tasks and two activities; activities run eagerly on the worker that scheduled them):",
        "",
        *breakdown_table(main, tuned),
        "",
        f"With 1 s LLM latency, {latency_steps}-step runs, {len(lb.values)} runs of each:",
        "",
        "| loop | wall s, sandboxed (default) | wall s, sandbox off |",
        "|---|---|---|",
        f"| (b) durable-manus | {lb.spread(fmt='{:.2f}')} | {tuned['lb'].spread(fmt='{:.2f}')} |",
        f"| (c) in-process | {lc.spread(fmt='{:.2f}')} | {tuned['lc'].spread(fmt='{:.2f}')} |",
        f"| (b)/(c) | **{latency_ratio:.3f}** | {t_latency:.3f} |",
        "",
        f"Target (b)/(c) <= {LATENCY_TARGET} with the defaults: **{verdict(latency_ratio, LATENCY_TARGET)}** "
        f"({ms(per_step_extra)} ms more per step; sandbox off "
        f"{ms((tuned['lb'].median - tuned['lc'].median) / latency_steps)} ms).",
    ]
    section.summary += [
        ("P1 ms/step bare / agent / in-process", f"{ms(a.median)} / {ms(b.median)} / {ms(c.median)}", "", ""),
        ("P1 agent/bare per step", f"{step_ratio:.2f}", f"<= {STEP_TARGET}", verdict(step_ratio, STEP_TARGET)),
        ("P1 agent/in-process wall, 1 s LLM", f"{latency_ratio:.3f}", f"<= {LATENCY_TARGET}",
         verdict(latency_ratio, LATENCY_TARGET)),
        ("P1 sandbox off: ms/step bare / agent", f"{ms(tuned['a'].median)} / {ms(tuned['b'].median)}", "", ""),
        ("P1 sandbox off: agent/bare, agent/in-process", f"{t_ratio:.2f}, {t_latency:.3f}", "", ""),
    ]
    return section
