"""P15 sandboxed call: what a step whose tool runs in the sandbox costs
against an editor step, with one sandbox per run (the default) and one per
call (`[tools] sandbox_per_run = false`).

Four kinds of run, interleaved, each STEPS steps of one tool call and a
plain answer (the lean fake LLM, no latency), workers in this process:

  editor        str_replace_editor `view` of a 5-line file (the worker's own
                Python: no sandbox), a local activity as in a new run;
  editor activity  the same view as an activity (an input without local_reads):
                the unsandboxed call that the target holds bash against;
  bash per run  bash `echo ping`; the run's first call starts bubblewrap with
                the exec server inside, later calls enter it;
  bash per call the same with a bubblewrap and a call guard for every call.

Worker CPU is this process's user + system time plus that of every process
it waited for over the run: a run's sandbox is closed (its server told to
end, then reaped) before the figure is read, so its processes count too.
"""

from __future__ import annotations

import resource
import time
import uuid

from agent_model.run import AgentState
from agent_model.workspace_names import workspace_name_for
from bench.common import Samples, bench_profile, bench_settings, log, new_run_id, start_agent, verdict
from bench.context import Context, Section
from runtime.worker_factory import build_worker

STEPS, QUICK_STEPS = 30, 10
ROUNDS, QUICK_ROUNDS = 5, 2
TARGET = 1.3
"""Issue 24: a bash echo step costs at most 1.3x an editor step."""
NOTES_TEXT = "".join(f"line {i}: a small file for the benchmark's view calls\n" for i in range(1, 6))
VIEW = {"command": "view", "path": "notes.txt"}
KINDS = {
    "editor": ("str_replace_editor", VIEW, True),
    "editor activity": ("str_replace_editor", VIEW, True),
    "bash per run": ("bash", {"command": "echo ping"}, True),
    "bash per call": ("bash", {"command": "echo ping"}, False),
}
"""kind: (tool, arguments, one sandbox per run)."""
LOCAL = {"editor"}
"""Kinds whose view runs as a local activity (a new run's default); the others are activities."""
BASELINE = "editor activity"
"""The unsandboxed call a sandboxed one is held against: the same view as an activity, as bash is."""


def cpu_seconds() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def end_sandboxes(worker) -> None:
    """Let each run sandbox's server end by itself (control socket closed),
    so that its processes are reaped and their CPU counted."""
    runs = worker.run_sandboxes
    if runs is None:
        return
    for box in runs.running.values():
        box.control.close()
        try:
            box.process.wait(timeout=5)
        except Exception:  # noqa: BLE001 - killed below
            pass
    runs.close_all()


async def one_run(ctx: Context, settings, worker, kind: str, steps: int) -> tuple[float, float]:
    tool, args, _ = KINDS[kind]
    run_id = new_run_id("bench-p15")
    directory = settings.workspace_root / workspace_name_for(run_id)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "notes.txt").write_text(NOTES_TEXT)
    cpu_before, began = cpu_seconds(), time.perf_counter()
    script = {"tool": tool, "args": args, "turns": steps}
    handle = await start_agent(
        ctx.client, settings, bench_profile(steps + 1, [tool]), script, run_id=run_id, local_reads=kind in LOCAL
    )
    result = await handle.result()
    wall = time.perf_counter() - began
    end_sandboxes(worker)
    cpu = cpu_seconds() - cpu_before
    calls = [call for step in result.steps for call in step.tool_calls]
    if result.state != AgentState.FINISHED or len(calls) != steps or any(call.error for call in calls):
        raise RuntimeError(
            f"P15 {kind} run {run_id}: expected {steps} clean calls, got {len(calls)}, "
            f"{result.state.value}/{result.stop_reason.value}: {[c.observation[:200] for c in calls if c.error][:2]}"
        )
    if tool == "bash" and "ping" not in calls[-1].observation:
        raise RuntimeError(f"P15 {kind}: bash answered {calls[-1].observation[:200]!r}")
    return wall / steps, cpu / steps


async def run(ctx: Context) -> Section:
    section = Section("P15")
    steps, rounds = (QUICK_STEPS, QUICK_ROUNDS) if ctx.quick else (STEPS, ROUNDS)
    root = ctx.workspace("p15")
    per_run = bench_settings(ctx.fake.base_url, root)
    per_call = bench_settings(ctx.fake.base_url, root, task_queue=f"bench-p15-{uuid.uuid4().hex[:8]}").model_copy(
        update={"tool_sandbox_per_run": False}
    )
    wall = {kind: Samples() for kind in KINDS}
    cpu = {kind: Samples() for kind in KINDS}
    async with build_worker(ctx.client, per_run) as on, build_worker(ctx.client, per_call) as off:
        if on.run_sandboxes is None or off.run_sandboxes is not None:
            raise RuntimeError("P15 needs bubblewrap: the worker's tool sandbox has no per-run sandboxes")
        workers = {True: (per_run, on), False: (per_call, off)}
        for kind in KINDS:  # warm-up
            await one_run(ctx, *workers[KINDS[kind][2]], kind, 3)
        for i in range(rounds):
            for kind in KINDS:
                w, c = await one_run(ctx, *workers[KINDS[kind][2]], kind, steps)
                wall[kind].add(w)
                cpu[kind].add(c)
            log(f"P15 round {i + 1}/{rounds}: " + ", ".join(f"{k} {wall[k].values[-1] * 1000:.1f} ms" for k in KINDS))

    def ratio(samples: dict[str, Samples], kind: str, baseline: str = BASELINE) -> float:
        return samples[kind].median / samples[baseline].median

    section.markdown += [
        "## P15 sandboxed tool call",
        "",
        f"{rounds} interleaved rounds of four runs of {steps} steps, each step one tool call (then a plain "
        "answer; lean fake LLM without latency; workers in this process, bubblewrap sandbox). `editor`: "
        "str_replace_editor `view` of a 5-line file (no sandbox), a local activity as in every new run (a call "
        "that only reads runs in the workflow task, docs/tools.md); `editor activity`: the same view as an "
        "activity (the run's input without the rule), the unsandboxed call the sandboxed ones are held against; "
        "`bash per run`: bash `echo ping` in the run's sandbox, entered by each call (the default); `bash per "
        "call`: the same with `[tools] sandbox_per_run = false`, a bubblewrap and a call guard for each call. "
        "Worker CPU includes the sandboxes' processes (each run's sandbox is ended and reaped before it is "
        "read). Per step, median (min-max).",
        "",
        "| kind | wall ms/step | worker CPU ms/step | wall / editor activity | CPU / editor activity |",
        "|---|---|---|---|---|",
        *(
            f"| {kind} | {wall[kind].spread(1000)} | {cpu[kind].spread(1000)} | {ratio(wall, kind):.2f} | "
            f"{ratio(cpu, kind):.2f} |"
            for kind in KINDS
        ),
        "",
        f"One sandbox per run saves {(wall['bash per call'].median - wall['bash per run'].median) * 1000:.1f} ms "
        f"wall and {(cpu['bash per call'].median - cpu['bash per run'].median) * 1000:.1f} ms CPU per call.",
    ]
    on_ratio = ratio(wall, "bash per run")
    section.summary += [
        ("P15 bash echo step / editor step as an activity, one sandbox per run, wall (CPU)",
         f"{on_ratio:.2f} ({ratio(cpu, 'bash per run'):.2f})", f"<= {TARGET}", verdict(on_ratio, TARGET)),
        ("P15 bash echo step / editor step as an activity, one sandbox per call, wall (CPU)",
         f"{ratio(wall, 'bash per call'):.2f} ({ratio(cpu, 'bash per call'):.2f})", "", ""),
        ("P15 bash echo step / editor step as a local read, one sandbox per run, wall (CPU)",
         f"{ratio(wall, 'bash per run', 'editor'):.2f} ({ratio(cpu, 'bash per run', 'editor'):.2f})", "", ""),
    ]
    return section
