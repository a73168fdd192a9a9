"""P6 browser step: what one durable browser_use step costs, against the same
browser action called directly on the engine (no Temporal, no workflow), and
what the durable part of it costs against an ordinary tool's step.

(a) durable: an AgentWorkflow whose every step is one browser_use action on
    the fixture site (testkit/fake_site.py), fake LLM without latency, Chromium
    in the tool sandbox; the step time is the median gap between consecutive
    browser_act completions in the run's history, the action time the median
    of their started -> completed.
(b) direct: the same action, as many times, on BrowserSessions.act.
(c) an ordinary step: the same loop with a str_replace_editor view (P1's (b)),
    its step time measured the same way.

Two actions: go_to_url (a navigation, then the page map and a screenshot) and
scroll_down (no navigation). Also reported: the first action of a run (the
browser's launch in its sandbox), the history written per step, and the
screenshot's size on disk (none of it in history). Target: what the durable
step adds to the direct action, (a) - (b) (the think, the workflow's turns,
the routing to the browser's worker), is at most 1.3x an ordinary tool's
whole step (c): the browser's routing costs little next to the loop itself.
"""

from __future__ import annotations

import shutil
import statistics
import time
import uuid

from agent_model.browser import BrowserRequest, BrowserState
from agent_model.workspace_names import workspace_name_for
from testkit.run_results import final_result
from bench.common import Samples, bench_profile, bench_settings, check_result, log, new_run_id, start_agent, verdict
from bench.context import Context, Section
from bench.p1_step_overhead import NOTES, NOTES_TEXT, VIEW_ARGS
from config.settings import WebSettings
from runtime.worker_factory import build_worker, worker_resources
from testkit.fake_site import FakeSite

STEPS, QUICK_STEPS = 20, 8
REPEATS, QUICK_REPEATS = 3, 1
TARGET = 1.3
ACTIONS = {
    "go_to_url": lambda site: {"action": "go_to_url", "url": site.url("/long")},
    "scroll_down": lambda site: {"action": "scroll_down", "scroll_amount": 200},
}


def timestamps(history, kind: str) -> list[tuple[float, float]]:
    """(started, completed) seconds of every `kind` activity, in order."""
    scheduled, started, spans = {}, {}, []
    for event in history.events:
        at = event.event_time.seconds + event.event_time.nanos / 1e9
        if event.HasField("activity_task_scheduled_event_attributes"):
            scheduled[event.event_id] = event.activity_task_scheduled_event_attributes.activity_type.name
        elif event.HasField("activity_task_started_event_attributes"):
            started[event.activity_task_started_event_attributes.scheduled_event_id] = at
        elif event.HasField("activity_task_completed_event_attributes"):
            sid = event.activity_task_completed_event_attributes.scheduled_event_id
            if scheduled.get(sid) == kind:
                spans.append((started[sid], at))
    return spans


async def durable(ctx: Context, site: FakeSite, action: str, steps: int) -> dict[str, float]:
    root = ctx.workspace(f"p6-{action}")
    settings = bench_settings(ctx.fake.base_url, root).model_copy(
        update={"tool_sandbox": "auto", "web": WebSettings(allow=(site.origin,))}
    )
    profile = bench_profile(steps, ["browser_use"])
    # The run opens its page first, so scroll_down has a page to scroll.
    script = {"tool": "browser_use", "first_args": ACTIONS["go_to_url"](site), "args": ACTIONS[action](site)}
    async with build_worker(ctx.client, settings):
        handle = await start_agent(ctx.client, settings, profile, script)
        result = await final_result(handle)
        history = await handle.fetch_history()
    check_result(result, steps, f"P6 {action}")
    spans = timestamps(history, "browser_act")
    gaps = [b[1] - a[1] for a, b in zip(spans, spans[1:])]
    shots = list((root / workspace_name_for(handle.id) / "browser").iterdir())
    return {
        "first": spans[0][1] - spans[0][0],
        "action": statistics.median(end - start for start, end in spans[1:]),
        "step": statistics.median(gaps),
        "history_per_step": sum(e.ByteSize() for e in history.events) / steps,
        "screenshot": statistics.median(p.stat().st_size for p in shots),
    }


async def ordinary(ctx: Context, steps: int) -> float:
    """Median step of a run that views a small file each step (no browser)."""
    root = ctx.workspace("p6-ordinary")
    settings = bench_settings(ctx.fake.base_url, root)
    run_id = new_run_id("bench-p6")
    run_dir = root / workspace_name_for(run_id)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / NOTES).write_text(NOTES_TEXT)
    async with build_worker(ctx.client, settings):
        handle = await start_agent(
            ctx.client, settings, bench_profile(steps, ["str_replace_editor"]),
            {"tool": "str_replace_editor", "args": VIEW_ARGS}, run_id,
        )
        result = await final_result(handle)
        history = await handle.fetch_history()
    check_result(result, steps, "P6 ordinary step")
    # From think to think: a new run's view is a local activity, with no activity events of its own.
    spans = timestamps(history, "think")
    return statistics.median(b[1] - a[1] for a, b in zip(spans, spans[1:]))


async def direct(ctx: Context, site: FakeSite, action: str, steps: int) -> dict[str, float]:
    root = ctx.workspace(f"p6-direct-{action}")
    settings = bench_settings(ctx.fake.base_url, root).model_copy(
        update={"tool_sandbox": "auto", "web": WebSettings(allow=(site.origin,))}
    )
    resources = worker_resources(settings, own_queue="p6-direct")
    sessions = resources.browser_sessions
    workspace = f"p6-{uuid.uuid4().hex[:8]}"
    resources.workspace.run_dir(workspace)
    state, times = BrowserState(), Samples()
    try:
        for i in range(steps + 1):
            arguments = ACTIONS["go_to_url"](site) if i == 0 else ACTIONS[action](site)  # as the durable run
            began = time.perf_counter()
            result = await sessions.act(
                BrowserRequest(workspace=workspace, session=workspace, action=arguments, restore=state,
                               screenshot_name=f"step-{i:04d}-1.jpg")
            )
            if i:
                times.add(time.perf_counter() - began)
            if result.error:
                raise RuntimeError(f"P6 direct {action}: {result.output[:200]}")
            state = result.state
    finally:
        await sessions.close_all()
        shutil.rmtree(root, ignore_errors=True)
    return {"action": times.median}


async def run(ctx: Context) -> Section:
    section = Section("P6")
    steps = QUICK_STEPS if ctx.quick else STEPS
    repeats = QUICK_REPEATS if ctx.quick else REPEATS
    site = FakeSite().start()
    loop_steps: list[float] = []
    durable_runs: dict[str, list[dict[str, float]]] = {action: [] for action in ACTIONS}
    direct_runs: dict[str, list[float]] = {action: [] for action in ACTIONS}
    try:
        # Interleaved, so a slow minute of the machine hits every figure alike.
        for repeat in range(repeats):
            log(f"P6 round {repeat + 1}/{repeats}: ordinary step, then each action durable and direct ({steps} steps)")
            loop_steps.append(await ordinary(ctx, steps))
            for action in ACTIONS:
                durable_runs[action].append(await durable(ctx, site, action, steps))
                direct_runs[action].append((await direct(ctx, site, action, steps))["action"])
    finally:
        site.stop()
    loop_step = statistics.median(loop_steps)

    md = section.markdown
    md += [
        "## P6 browser step",
        "",
        f"{repeats} rounds of runs of {steps} steps each, one browser_use action per step on the fixture site, "
        "Chromium in the tool sandbox, fake LLM without latency; each figure is the median over the rounds of "
        "the runs' medians. Direct: the same action on the engine (BrowserSessions.act), no Temporal.",
        "",
        f"An ordinary step (str_replace_editor view, same loop): {loop_step * 1000:.0f} ms "
        f"({', '.join(f'{v * 1000:.0f}' for v in loop_steps)}).",
        "",
        "| action | durable step (a) | its browser_act | direct action (b) | (a) - (b) | ((a) - (b)) / ordinary step | first action (launch) | history per step | screenshot file |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for action in ACTIONS:
        a = {key: statistics.median(run[key] for run in durable_runs[action]) for key in durable_runs[action][0]}
        b = statistics.median(direct_runs[action])
        added = a["step"] - b
        ratio = added / loop_step
        md.append(
            f"| {action} | {a['step'] * 1000:.0f} ms | {a['action'] * 1000:.0f} ms | {b * 1000:.0f} ms | "
            f"{added * 1000:.0f} ms | {ratio:.2f} | {a['first'] * 1000:.0f} ms | "
            f"{a['history_per_step'] / 1024:.1f} KiB | {a['screenshot'] / 1024:.0f} KiB |"
        )
        section.summary.append(
            (f"P6 {action}: durable extra / ordinary step", f"{ratio:.2f}", f"<= {TARGET}", verdict(ratio, TARGET))
        )
    return section
