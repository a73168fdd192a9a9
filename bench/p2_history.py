"""P2 history: how a run's Temporal history grows with its length.

Runs of 10, 50 and 100 steps (quick: 10, 20, 40); every step's bash call prints
10,000 characters (7,500 random bytes in base64, so nothing compresses it
away). The profile keeps max_observe=10000 (manus's), so no observation is
clipped. For each run: history bytes as JSON (`fetch_history().to_json()`) and
as protobuf (sum of the events' ByteSize()), against the content bytes: the
observations plus the model's replies (text and tool-call arguments). Prints
bytes/content and the growth exponent (least-squares slope of log(bytes) over
log(steps)), and which events hold the bytes. Full mode then lets one run of
the same kind go on for up to 220 steps, to see whether the server's history
size limit (50 MiB by default) ends it first.
"""

from __future__ import annotations

import math
import time
from collections import Counter

from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowFailureError

from bench.common import bench_profile, bench_settings, check_result, log, start_agent
from bench.context import Context, Section
from runtime.worker_factory import build_worker
from workflows.agent import AgentWorkflow

OUTPUT_CHARS = 10000
COMMAND = f"head -c {OUTPUT_CHARS * 3 // 4} /dev/urandom | base64 -w0"
MAX_OBSERVE = 10000


def slope(xs: list[float], ys: list[float]) -> float:
    lx, ly = [math.log(x) for x in xs], [math.log(y) for y in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly)) / sum((a - mx) ** 2 for a in lx)


def kib(n: float) -> str:
    return f"{n / 1024:,.0f} KiB" if n < 10 * 1024 * 1024 else f"{n / 1024 / 1024:,.1f} MiB"


def where_bytes_are(history, scheduled_types: dict[int, str]) -> Counter:
    """Protobuf bytes by kind of event; activity events by activity type."""
    kinds: Counter = Counter()
    for event in history.events:
        name = EventType.Name(event.event_type).removeprefix("EVENT_TYPE_").lower()
        if event.HasField("activity_task_scheduled_event_attributes"):
            name = f"{scheduled_types[event.event_id]} scheduled (input)"
        elif event.HasField("activity_task_completed_event_attributes"):
            owner = scheduled_types[event.activity_task_completed_event_attributes.scheduled_event_id]
            name = f"{owner} completed (result)"
        kinds[name] += event.ByteSize()
    return kinds


LIMIT_STEPS = 220
HISTORY_LIMIT = 50 * 2**20
"""The server's default history size limit (bytes)."""


async def run_to_the_limit(ctx: Context, settings, script: dict) -> dict:
    """A run of up to LIMIT_STEPS steps of the same kind: does the server's
    history size limit (50 MiB by default) end it first?"""
    profile = bench_profile(LIMIT_STEPS, ["bash"], max_observe=MAX_OBSERVE)
    handle = await start_agent(ctx.client, settings, profile, script)
    try:
        result = await handle.result()
        failure = None
    except WorkflowFailureError as e:
        result, failure = None, str(e.cause or e)
    info = (await handle.describe()).raw_description.workflow_execution_info
    history = await handle.fetch_history()
    bash_calls = {
        e.event_id for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
        and e.activity_task_scheduled_event_attributes.activity_type.name == "bash"
    }
    steps = sum(
        1 for e in history.events
        if e.HasField("activity_task_completed_event_attributes")
        and e.activity_task_completed_event_attributes.scheduled_event_id in bash_calls
    )
    del history
    size = kib(info.history_size_bytes)
    if result is not None:
        text = (f"A {LIMIT_STEPS}-step run of the same kind finished "
                f"({result.stop_reason.value}); its history is {size}, {info.history_length} events.")
        short = f"{LIMIT_STEPS}+ steps ({size})"
    else:
        text = (f"**A run of the same kind cannot reach {LIMIT_STEPS} steps:** the server ended it after "
                f"{steps} completed steps, with {info.history_length} events and {size} of history "
                f"(\"{failure}\"). The run does not end with a result; it is TERMINATED.")
        short = f"{steps} steps, then terminated ({size})"
    log(f"P2 limit run: {short}")
    return {"text": text, "short": short}


async def run(ctx: Context) -> Section:
    lengths = [10, 20, 40] if ctx.quick else [10, 50, 100]
    settings = bench_settings(ctx.fake.base_url, ctx.workspace("p2"))
    script = {"tool": "bash", "args": {"command": COMMAND}}
    rows = []
    async with build_worker(ctx.client, settings):
        for steps in lengths:
            profile = bench_profile(steps, ["bash"], max_observe=MAX_OBSERVE)
            began = time.perf_counter()
            handle = await start_agent(ctx.client, settings, profile, script)
            result = await handle.result()
            took = time.perf_counter() - began
            check_result(result, steps, "P2 run")
            history = await handle.fetch_history()
            json_bytes = len(history.to_json().encode())
            proto_bytes = sum(e.ByteSize() for e in history.events)
            # The full records (the result's own may be cut to fit its size budget).
            records = []
            while page := await handle.query(AgentWorkflow.steps, len(records)):  # one answer is one page
                records.extend(page)
            content = sum(
                len((s.thought or "").encode())
                + sum(len(c.observation.encode()) + len(c.arguments.encode()) for c in s.tool_calls)
                for s in records
            )
            observed = [len(c.observation) for s in records for c in s.tool_calls]
            scheduled = {
                e.event_id: e.activity_task_scheduled_event_attributes.activity_type.name
                for e in history.events
                if e.HasField("activity_task_scheduled_event_attributes")
            }
            rows.append(dict(
                steps=steps, json=json_bytes, proto=proto_bytes, content=content, events=len(history.events),
                took=took, kinds=where_bytes_are(history, scheduled), observed=(min(observed), max(observed)),
            ))
            log(f"P2 {steps} steps: history {kib(json_bytes)} JSON / {kib(proto_bytes)} protobuf, "
                f"content {kib(content)}, {len(history.events)} events, {took:.1f} s")
            del history
        limit = None if ctx.quick else await run_to_the_limit(ctx, settings, script)

    xs = [r["steps"] for r in rows]
    json_slope, proto_slope, content_slope = (
        slope(xs, [r["json"] for r in rows]), slope(xs, [r["proto"] for r in rows]),
        slope(xs, [r["content"] for r in rows]),
    )
    last = rows[-1]
    per_step = (last["proto"] - rows[-2]["proto"]) / (last["steps"] - rows[-2]["steps"])
    top = last["kinds"].most_common(4)
    section = Section("P2 history size")
    section.markdown += [
        f"Each step: one bash call printing {OUTPUT_CHARS:,} characters (`{COMMAND}`); "
        f"profile = manus prompts, tools bash+terminate, max_observe={MAX_OBSERVE} (observations "
        f"were {last['observed'][0]:,}-{last['observed'][1]:,} characters: none clipped), memory window "
        "max_memory_messages=100 (the default).",
        "",
        "| steps | events | history JSON | history protobuf | content | JSON / content | protobuf / content | run wall s |",
        "|---|---|---|---|---|---|---|---|",
        *[
            f"| {r['steps']} | {r['events']} | {kib(r['json'])} | {kib(r['proto'])} | {kib(r['content'])} | "
            f"{r['json'] / r['content']:.1f} | {r['proto'] / r['content']:.1f} | {r['took']:.1f} |"
            for r in rows
        ],
        "",
        f"Growth exponent (slope of log bytes over log steps, {', '.join(map(str, xs))} steps): "
        f"**JSON {json_slope:.2f}, protobuf {proto_slope:.2f}** (content: {content_slope:.2f}; "
        "1.0 would be linear); between consecutive lengths: "
        + ", ".join(
            f"{a['steps']}->{b['steps']} steps {slope([a['steps'], b['steps']], [a['proto'], b['proto']]):.2f}"
            for a, b in zip(rows, rows[1:])
        )
        + " (protobuf). Each think carries only the messages that are new since the previous think "
        "(README, \"How a think reaches the model\"), so an observation is stored about twice: in the "
        "tool's result and in the next think's input.",
        "",
        f"Between {rows[-2]['steps']} and {last['steps']} steps the history grew by "
        f"{kib(per_step)} per step (protobuf); at that rate Temporal's default {HISTORY_LIMIT // 2**20} MiB limit "
        f"would be reached after ~{int(HISTORY_LIMIT / per_step):,} steps (a projection, not a measured run).",
        "",
        f"Where the bytes are in the {last['steps']}-step run (protobuf): "
        + "; ".join(f"{name} {kib(size)} ({100 * size / last['proto']:.0f}%)" for name, size in top) + ".",
    ]
    if limit is not None:
        section.markdown += ["", limit["text"]]
        section.summary.append(("P2 longest run the server accepts (10 KB/step)", limit["short"], "", ""))
    section.summary += [
        (f"P2 history / content at {r['steps']} steps (JSON)", f"{r['json'] / r['content']:.1f}x ({kib(r['json'])})", "", "")
        for r in rows
    ]
    section.summary.append(("P2 growth exponent JSON / protobuf", f"{json_slope:.2f} / {proto_slope:.2f}", "", ""))
    section.summary.append(("P2 history per step (protobuf), projected steps to the limit",
                            f"{kib(per_step)}, ~{int(HISTORY_LIMIT / per_step):,} steps", "", ""))
    return section
