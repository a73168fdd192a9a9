"""P8 approval gate: what a gated call's wait machinery costs.

Three runs of P1's (b) step (a str_replace_editor `view` of a small file, fake
LLM without latency), on a worker in this process:

  none     no approval policy;
  checked  `--approve risky`: every call goes through the policy's check,
           which gates none of them (a view is not risky);
  gated    `--approve all`: every call waits at its gate, and an automatic
           decider in this process approves it as soon as the run's
           `pending_approval` query shows it (polled every POLL_SECONDS),
           with the `decide` update.

Rounds are interleaved none, checked, gated, ...; each figure is the median.
Per gated call: wall time and worker CPU (this process: the worker and the
decider's client) over the ungated run's, and the history events and bytes
it adds. The policy's own cost is checked / none.
"""

from __future__ import annotations

import asyncio
import os
import time

from agent_model.approval import ApprovalMode, ApprovalPolicy
from agent_model.approval_desk import ApprovalAction, ApprovalDecision
from agent_model.run import AgentRunInput
from agent_model.workspace_names import workspace_name_for
from testkit.run_results import final_result
from bench.common import Samples, bench_profile, bench_settings, check_result, cpu_seconds, log, new_run_id, task_for
from bench.context import Context, Section
from bench.p1_step_overhead import NOTES, NOTES_TEXT, TOOL, VIEW_ARGS
from runtime.worker_factory import build_worker
from workflows import search_attributes
from workflows.agent import AgentWorkflow

STEPS, QUICK_STEPS = 30, 10
ROUNDS, QUICK_ROUNDS = 5, 2
POLL_SECONDS = 0.005
"""How often the decider asks whether a call waits: well under a step's time,
so the wait measured is the machinery's, not the poll's (the CLI polls every 0.5 s)."""
POLICIES = {
    "none": None,
    "checked": ApprovalPolicy(mode=ApprovalMode.RISKY),
    "gated": ApprovalPolicy(mode=ApprovalMode.ALL),
}


async def approve_as_shown(handle, steps: int) -> int:
    """Approve each call as soon as it waits, until `steps` are decided; the queries it sent."""
    decided, queries = set(), 0
    while len(decided) < steps:
        queries += 1
        waiting = await handle.query(AgentWorkflow.pending_approval)
        if waiting is not None and waiting.id not in decided:
            await handle.execute_update(
                AgentWorkflow.decide,
                ApprovalDecision(call_id=waiting.id, action=ApprovalAction.APPROVE, decided_by="bench"),
            )
            decided.add(waiting.id)
        else:
            await asyncio.sleep(POLL_SECONDS)
    return queries


async def one_run(ctx: Context, settings, steps: int, kind: str) -> dict[str, float]:
    run_id = new_run_id(f"bench-p8-{kind}")
    run_dir = settings.workspace_root / workspace_name_for(run_id)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / NOTES).write_text(NOTES_TEXT)
    profile = bench_profile(steps, [TOOL])
    script = {"tool": TOOL, "args": VIEW_ARGS, "run": run_id}
    cpu, began = cpu_seconds(os.getpid()), time.perf_counter()
    handle = await ctx.client.start_workflow(
        AgentWorkflow.run,
        AgentRunInput(task=task_for(script), profile=profile, approval=POLICIES[kind]),
        id=run_id,
        task_queue=settings.task_queue,
        search_attributes=search_attributes.initial(profile.name),
        static_summary="benchmark run",
    )
    queries = await approve_as_shown(handle, steps) if kind == "gated" else 0
    result = await final_result(handle)
    wall, cpu = time.perf_counter() - began, cpu_seconds(os.getpid()) - cpu
    check_result(result, steps, f"P8 {kind} run")
    if kind == "gated":
        assert all(c.approval is not None for s in result.steps for c in s.tool_calls if c.name == TOOL)
    info = (await handle.describe()).raw_description.workflow_execution_info
    return {
        "wall": wall, "cpu": cpu, "events": info.history_length, "bytes": info.history_size_bytes, "queries": queries,
    }


async def run(ctx: Context) -> Section:
    section = Section("P8")
    steps = QUICK_STEPS if ctx.quick else STEPS
    rounds = QUICK_ROUNDS if ctx.quick else ROUNDS
    settings = bench_settings(ctx.fake.base_url, ctx.workspace("p8"))
    samples = {kind: {m: Samples() for m in ("wall", "cpu", "events", "bytes", "queries")} for kind in POLICIES}
    async with build_worker(ctx.client, settings):
        for kind in POLICIES:  # warm-up
            await one_run(ctx, settings, 3, kind)
        for i in range(rounds):
            for kind in POLICIES:
                for measure, value in (await one_run(ctx, settings, steps, kind)).items():
                    samples[kind][measure].add(value)
            log(
                f"P8 round {i + 1}/{rounds}: " + ", ".join(
                    f"{kind} {samples[kind]['wall'].values[-1] * 1000 / steps:.1f} ms/step" for kind in POLICIES
                )
            )

    def per_step(kind: str, measure: str, scale: float = 1.0) -> float:
        return samples[kind][measure].median * scale / steps

    none, gated = "none", "gated"
    wall_ratio = samples[gated]["wall"].median / samples[none]["wall"].median
    cpu_ratio = samples[gated]["cpu"].median / samples[none]["cpu"].median
    policy_ratio = samples["checked"]["wall"].median / samples[none]["wall"].median
    policy_cpu_ratio = samples["checked"]["cpu"].median / samples[none]["cpu"].median
    extra_wall = per_step(gated, "wall", 1000) - per_step(none, "wall", 1000)
    extra_cpu = per_step(gated, "cpu", 1000) - per_step(none, "cpu", 1000)
    extra_events = per_step(gated, "events") - per_step(none, "events")
    extra_bytes = per_step(gated, "bytes") - per_step(none, "bytes")

    md = section.markdown
    md += [
        "## P8 approval gate",
        "",
        f"{rounds} interleaved rounds of three runs of {steps} steps each (P1's (b) step: a str_replace_editor view, "
        "fake LLM without latency) on a worker in this process: no policy; `--approve risky`, whose check gates "
        f"none of the calls; `--approve all`, every call approved by a decider that polls `pending_approval` every "
        f"{POLL_SECONDS * 1000:.0f} ms and sends `decide` as soon as the call shows. Medians; CPU is this process "
        "(worker and decider).",
        "",
        "| per step | wall ms | worker CPU ms | history events | history bytes | decider queries |",
        "|---|---|---|---|---|---|",
    ]
    for kind in POLICIES:
        md.append(
            f"| {kind} | {per_step(kind, 'wall', 1000):.1f} | {per_step(kind, 'cpu', 1000):.1f} | "
            f"{per_step(kind, 'events'):.1f} | {per_step(kind, 'bytes'):.0f} | {per_step(kind, 'queries'):.1f} |"
        )
    md += [
        "",
        f"A gated call approved at once costs {extra_wall:.1f} ms of wall time and {extra_cpu:.1f} ms of worker CPU "
        f"more than an ungated one (gated / none: wall {wall_ratio:.2f}x, CPU {cpu_ratio:.2f}x), and adds "
        f"{extra_events:.1f} history events and {extra_bytes:.0f} bytes (the update's accepted and completed events "
        f"and the workflow tasks around the wait). The policy's check alone: wall {policy_ratio:.2f}x, CPU "
        f"{policy_cpu_ratio:.2f}x of no policy.",
    ]
    section.summary += [
        ("P8 gated call approved at once / ungated (wall)", f"{wall_ratio:.2f}", "report", ""),
        ("P8 extra per gated call", f"{extra_wall:.1f} ms, {extra_events:.1f} events, {extra_bytes:.0f} B", "report", ""),
        ("P8 policy checked, not gating / no policy (wall)", f"{policy_ratio:.2f}", "report", ""),
    ]
    return section
