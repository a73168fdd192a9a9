"""P3 scale: many concurrent agent runs on one worker.

N runs x 10 steps (200 in full mode, 40 quick), fake LLM with 200 ms latency,
one str_replace_editor `view` per step, one worker in this process. Measures
total wall (first start to last result) against one run's wall measured alone
with the same worker; target <= 1.5. Measured with the SDK's default worker
options and with tuned ones, and for reference with the bare Temporal loop
(bench/bare.py) under the same load. Also reports the CPU seconds the server
and this process used during the concurrent runs, the benchmark process's peak
RSS, and how far the fake LLM's answers were from the scripted 200 ms (to show
the fake is not the bottleneck).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from typing import Any

from temporalio.worker import PollerBehaviorSimpleMaximum

from agent_model.workspace_names import workspace_name_for
from testkit.run_results import final_result
from bench.bare import BareLoopWorkflow, bare_worker
from bench.common import (
    CpuMeter,
    Samples,
    bench_profile,
    bench_settings,
    check_result,
    current_rss_mib,
    log,
    new_run_id,
    peak_rss_mib,
    start_agent,
    verdict,
)
from bench.context import Context, Section
from runtime.worker_factory import build_worker

TOOL = "str_replace_editor"
NOTES = "notes.txt"
STEPS = 10
LATENCY = 0.2
TARGET = 1.5


def tuned_options(runs: int) -> dict[str, Any]:
    """Worker options for `runs` concurrent runs: every run may have its think
    (or tool call) in flight at once, every run stays in the sticky cache, and
    enough pollers keep the slots fed."""
    return dict(
        max_concurrent_activities=runs + 50,
        max_concurrent_workflow_tasks=100,
        max_cached_workflows=max(1000, 2 * runs),
        workflow_task_poller_behavior=PollerBehaviorSimpleMaximum(10),
        activity_task_poller_behavior=PollerBehaviorSimpleMaximum(10),
    )


def describe(options: dict[str, Any]) -> str:
    if not options:
        return "SDK defaults"
    parts = []
    for key, value in options.items():
        if isinstance(value, PollerBehaviorSimpleMaximum):
            value = f"{value.maximum} pollers"
        parts.append(f"{key}={value}")
    return ", ".join(parts)


class RssSampler:
    """Largest VmRSS seen while running (every 100 ms)."""

    def __init__(self) -> None:
        self.peak = current_rss_mib()
        self._task: asyncio.Task | None = None

    async def _loop(self) -> None:
        while True:
            self.peak = max(self.peak, current_rss_mib())
            await asyncio.sleep(0.1)

    def __enter__(self) -> "RssSampler":
        self._task = asyncio.get_running_loop().create_task(self._loop())
        return self

    def __exit__(self, *exc) -> None:
        assert self._task is not None
        self._task.cancel()
        self.peak = max(self.peak, current_rss_mib())


class P3:
    def __init__(self, ctx: Context, workflow_sandbox: bool = True) -> None:
        self.ctx = ctx
        self.root = ctx.workspace("p3")
        self.settings = bench_settings(ctx.fake.base_url, self.root).model_copy(
            update={"workflow_sandbox": workflow_sandbox}
        )
        self.profile = bench_profile(STEPS, [TOOL])
        self.script = {"tool": TOOL, "args": {"command": "view", "path": NOTES}, "delay": LATENCY}

    task_timeouts = 0
    """Workflow tasks of the concurrent runs that timed out."""
    heartbeat_timeouts = 0
    """Activity attempts of the concurrent runs that ended on a heartbeat timeout (none died)."""
    failed_runs = 0
    """Concurrent runs that did not take their 10 clean steps."""

    def _new_run(self) -> str:
        run_id = new_run_id("bench-p3")
        directory = self.root / workspace_name_for(run_id)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / NOTES).write_text("a small file\n" * 5)
        return run_id

    async def one(self) -> float:
        run_id = self._new_run()
        began = time.perf_counter()
        handle = await start_agent(self.ctx.client, self.settings, self.profile, self.script, run_id=run_id)
        check_result(await final_result(handle), STEPS, "P3 single run")
        return time.perf_counter() - began

    async def many(self, runs: int) -> float:
        ids = [self._new_run() for _ in range(runs)]
        began = time.perf_counter()
        handles = await asyncio.gather(
            *(start_agent(self.ctx.client, self.settings, self.profile, self.script, run_id=i) for i in ids)
        )
        results = await asyncio.gather(*(final_result(h) for h in handles))
        elapsed = time.perf_counter() - began
        for result in results:
            # A run that ended early is counted and shown, not a reason to lose the whole benchmark.
            try:
                check_result(result, STEPS, "P3 concurrent run")
            except RuntimeError as e:
                self.failed_runs += 1
                log(f"{e}")
        histories = await asyncio.gather(*(h.fetch_history() for h in handles))
        self.task_timeouts += sum(
            1 for h in histories for e in h.events if e.HasField("workflow_task_timed_out_event_attributes")
        )
        self.heartbeat_timeouts += sum(heartbeat_timeouts(h) for h in histories)
        return elapsed


def heartbeat_timeouts(history) -> int:
    """Attempts that ended on a heartbeat timeout: each retried attempt's start names its predecessor's failure."""
    return sum(
        1 for e in history.events
        if e.HasField("activity_task_started_event_attributes")
        and "Heartbeat" in e.activity_task_started_event_attributes.last_failure.message
    )


async def measure(
    ctx: Context, runs: int, options: dict[str, Any], reps: int, workflow_sandbox: bool = True
) -> dict[str, Any]:
    p = P3(ctx, workflow_sandbox)
    alone, total = Samples(), Samples()
    async with build_worker(ctx.client, p.settings, **options):
        await p.one()  # warm-up
        for _ in range(3):
            alone.add(await p.one())
        stats_before = len(await ctx.fake.stats())
        meters = []
        with RssSampler() as sampler:
            for rep in range(reps):
                meter = meter_for(ctx).start()
                elapsed = await p.many(runs)
                meters.append(meter.stop())
                total.add(elapsed)
                log(f"P3 {runs} runs ({describe(options)}): {elapsed:.2f} s "
                    f"(alone {alone.median:.2f} s) rep {rep + 1}/{reps}")
    requests = (await ctx.fake.stats())[stats_before:]
    lag = sorted(r["answered"] - r["received"] - LATENCY for r in requests if "answered" in r)
    return {
        "alone": alone,
        "total": total,
        "ratio": total.median / alone.median,
        "rss_peak": sampler.peak,
        "fake_lag_p50": statistics.median(lag) if lag else float("nan"),
        "fake_lag_p99": lag[int(0.99 * (len(lag) - 1))] if lag else float("nan"),
        "requests": len(requests),
        "options": describe(options) + ("" if workflow_sandbox else "; `[worker] workflow_sandbox = false`"),
        "cpu": median_cpu(meters),
        "task_timeouts": p.task_timeouts,
        "heartbeat_timeouts": p.heartbeat_timeouts,
        "failed_runs": p.failed_runs,
    }


async def measure_bare(ctx: Context, runs: int, options: dict[str, Any]) -> dict[str, Any]:
    """The same load on the bare Temporal loop (bench/bare.py, the think echo
    sleeping LATENCY): what the server, the SDK and this machine allow at all."""
    queue = new_run_id("bench-p3-bare")

    async def one() -> float:
        began = time.perf_counter()
        await ctx.client.execute_workflow(
            BareLoopWorkflow.run, args=[STEPS, LATENCY], id=new_run_id("bench-p3-bare"), task_queue=queue
        )
        return time.perf_counter() - began

    alone, total = Samples(), Samples()
    async with bare_worker(ctx.client, queue, **options):
        await one()
        for _ in range(3):
            alone.add(await one())
        meter = meter_for(ctx).start()
        began = time.perf_counter()
        handles = await asyncio.gather(*(
            ctx.client.start_workflow(
                BareLoopWorkflow.run, args=[STEPS, LATENCY], id=new_run_id("bench-p3-bare"), task_queue=queue
            )
            for _ in range(runs)
        ))
        await asyncio.gather(*(final_result(h) for h in handles))
        total.add(time.perf_counter() - began)
        meter.stop()
    log(f"P3 bare loop, {runs} runs: {total.median:.2f} s (alone {alone.median:.2f} s)")
    return {
        "alone": alone, "total": total, "ratio": total.median / alone.median, "options": describe(options),
        "cpu": meter.used,
    }


def meter_for(ctx: Context) -> CpuMeter:
    assert ctx.server.process is not None
    return CpuMeter(server=ctx.server.process.pid, worker=os.getpid(), fake=ctx.fake.process.pid)


def median_cpu(meters: list[CpuMeter]) -> dict[str, float]:
    return {name: statistics.median(m.used[name] for m in meters) for name in meters[0].used}


def cpu_cell(cpu: dict[str, float], steps: int) -> str:
    return (f"{cpu['server']:.1f} / {cpu['worker']:.1f} "
            f"({1000 * cpu['server'] / steps:.1f} / {1000 * cpu['worker'] / steps:.1f} ms per step)")


async def run(ctx: Context) -> Section:
    runs = 40 if ctx.quick else 200
    section = Section("P3 scale")
    variants = [
        ("defaults", {}, 1, True),
        ("tuned", tuned_options(runs), 1 if ctx.quick else 2, True),
        ("tuned, sandbox off", tuned_options(runs), 1, False),
    ]
    results = {}
    for label, options, reps, workflow_sandbox in variants:
        results[label] = await measure(ctx, runs, options, reps, workflow_sandbox)
    bare = await measure_bare(ctx, runs, tuned_options(runs))
    tuned = results["tuned"]
    peak_rss = peak_rss_mib()
    section.markdown += [
        f"{runs} concurrent runs x {STEPS} steps, fake LLM latency {LATENCY * 1000:.0f} ms, "
        f"one `{TOOL} view` per step, one worker in the benchmark process. "
        "\"alone\" is one run on the same worker with nothing else running (median of 3).",
        "",
        "| worker options | one run alone s | all runs s | ratio | CPU s during all runs: server / benchmark process (worker + client) |",
        "|---|---|---|---|---|",
        *[
            f"| {label}: {r['options']} | {r['alone'].spread(fmt='{:.2f}')} | "
            f"{r['total'].spread(fmt='{:.2f}')} | {r['ratio']:.2f} | {cpu_cell(r['cpu'], runs * STEPS)} |"
            for label, r in results.items()
        ],
        f"| reference: bare Temporal loop (bench/bare.py, think echo sleeps {LATENCY * 1000:.0f} ms), "
        f"tuned options | {bare['alone'].spread(fmt='{:.2f}')} | {bare['total'].spread(fmt='{:.2f}')} | "
        f"{bare['ratio']:.2f} | {cpu_cell(bare['cpu'], runs * STEPS)} |",
        "",
        f"**tuned: {tuned['ratio']:.2f}** (target <= {TARGET}: {verdict(tuned['ratio'], TARGET)}). "
        f"The machine has {os.cpu_count()} cores: {runs * STEPS} steps at the CPU cost per step above need at least "
        f"{(tuned['cpu']['server'] + tuned['cpu']['worker']) / (os.cpu_count() or 1):.0f} s of wall time "
        f"even with every core busy, against {tuned['alone'].median:.2f} s for one run alone.",
        "",
        f"Fake LLM: {tuned['requests']} requests in the tuned concurrent runs; time from reading a request "
        f"to answering it beyond the scripted {LATENCY * 1000:.0f} ms: p50 {tuned['fake_lag_p50'] * 1000:.1f} ms, "
        f"p99 {tuned['fake_lag_p99'] * 1000:.1f} ms (the fake runs in its own process on one asyncio loop).",
        "",
        f"Benchmark process (worker + client): peak RSS {peak_rss:.0f} MiB (getrusage, includes P1 before it); "
        f"largest VmRSS sampled during the tuned concurrent runs {tuned['rss_peak']:.0f} MiB.",
    ]
    section.summary += [
        (f"P3 {runs} runs / one run, wall (tuned)", f"{tuned['ratio']:.2f}", f"<= {TARGET}", verdict(tuned["ratio"], TARGET)),
        (f"P3 {runs} runs / one run, wall (defaults)", f"{results['defaults']['ratio']:.2f}", "", ""),
        (f"P3 {runs} runs / one run, wall (tuned, sandbox off)", f"{results['tuned, sandbox off']['ratio']:.2f}", "", ""),
        (f"P3 {runs} runs / one run, bare Temporal loop", f"{bare['ratio']:.2f}", "", ""),
        ("P3 peak RSS, benchmark process", f"{peak_rss:.0f} MiB", "", ""),
        ("P3 concurrent runs that ended before their 10 steps (all option sets)",
         str(sum(r["failed_runs"] for r in results.values())), "0",
         verdict(sum(r["failed_runs"] for r in results.values()), 0)),
        ("P3 activity attempts ended by a heartbeat timeout, no worker lost (all option sets)",
         str(sum(r["heartbeat_timeouts"] for r in results.values())), "0",
         verdict(sum(r["heartbeat_timeouts"] for r in results.values()), 0)),
        ("P3 workflow task timeouts in the concurrent runs (all option sets)",
         str(sum(r["task_timeouts"] for r in results.values())), "0",
         verdict(sum(r["task_timeouts"] for r in results.values()), 0)),
    ]
    return section
