"""P11 tracing cost: what OpenTelemetry tracing ([telemetry], docs/tracing.md)
adds to a step.

Two workers in this process, on two task queues: one without tracing, one
exporting every span over OTLP/HTTP (the real exporter, batched) to a local
receiver in its own process (bench/otlp_sink.py). Runs of STEPS steps, each
step a think and one str_replace_editor `view` (the cheapest real tool, as
in P1), alternate off, on, off, on, ...; the traced run's timing includes a
flush of its spans, so their export is counted in it. Reported: wall and
worker CPU (this process: worker, exporter thread and client) per step,
median of each kind, and the ratios on/off.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import uuid

from agent_model.workspace_names import workspace_name_for
from bench.common import (
    REPO_DIR,
    CpuMeter,
    Samples,
    bench_profile,
    bench_settings,
    check_result,
    log,
    ms,
    new_run_id,
    start_agent,
)
from bench.context import Context, Section
from config.telemetry_settings import TelemetrySettings
from runtime.tracing import tracing_for
from runtime.worker_factory import build_worker
from testkit.run_results import final_result

TOOL = "str_replace_editor"
NOTES = "notes.txt"
VIEW_ARGS = {"command": "view", "path": NOTES}
SPANS_PER_STEP = 7
"""step, execute_tool, chat, and StartActivity/RunActivity for the think and the tool."""


class Sink:
    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bench.otlp_sink"], cwd=REPO_DIR, stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        assert self.process.stdout is not None
        word, port = self.process.stdout.readline().decode().split()
        assert word == "PORT", word
        self.endpoint = f"http://127.0.0.1:{port}"

    async def stats(self) -> dict[str, int]:
        reader, writer = await asyncio.open_connection("127.0.0.1", int(self.endpoint.rsplit(":", 1)[1]))
        try:
            writer.write(b"GET /stats HTTP/1.1\r\nHost: sink\r\nConnection: close\r\n\r\n")
            await writer.drain()
            data = await reader.read()
        finally:
            writer.close()
        return json.loads(data.split(b"\r\n\r\n", 1)[1])

    def stop(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.wait(timeout=10)


async def one_run(ctx: Context, settings, steps: int, flush) -> tuple[float, float]:
    """(wall, worker CPU) seconds of one run of `steps` steps."""
    run_id = new_run_id("bench-p11")
    directory = settings.workspace_root / workspace_name_for(run_id)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / NOTES).write_text("a small file for the benchmark's view calls\n" * 5)
    meter = CpuMeter(worker=os.getpid()).start()
    began = time.perf_counter()
    handle = await start_agent(ctx.client, settings, bench_profile(steps, [TOOL]), {"tool": TOOL, "args": VIEW_ARGS}, run_id=run_id)
    result = await final_result(handle)
    if flush is not None:
        await asyncio.to_thread(flush)
    wall, cpu = time.perf_counter() - began, meter.stop().used["worker"]
    check_result(result, steps, "P11 run")
    return wall, cpu


async def run(ctx: Context) -> Section:
    steps = 20 if ctx.quick else 50
    reps = 3 if ctx.quick else 8
    sink = Sink()
    try:
        plain = bench_settings(ctx.fake.base_url, ctx.workspace("p11"))
        traced = plain.model_copy(update={
            "task_queue": f"bench-{uuid.uuid4().hex[:8]}",
            "telemetry": TelemetrySettings(otlp_endpoint=sink.endpoint, service_name="bench"),
        })
        tracing = tracing_for(traced.telemetry)
        assert tracing is not None
        out = {k: Samples() for k in ("wall_off", "wall_on", "cpu_off", "cpu_on")}
        async with build_worker(ctx.client, plain), build_worker(ctx.client, traced, tracing=tracing):
            log("P11 warm-up (3 steps each)")
            await one_run(ctx, plain, 3, None)
            await one_run(ctx, traced, 3, tracing.provider.force_flush)
            before = await sink.stats()
            for rep in range(reps):
                for kind, settings, flush in (("off", plain, None), ("on", traced, tracing.provider.force_flush)):
                    wall, cpu = await one_run(ctx, settings, steps, flush)
                    out[f"wall_{kind}"].add(wall / steps)
                    out[f"cpu_{kind}"].add(cpu / steps)
                log(f"P11 rep {rep + 1}/{reps}: off {ms(out['wall_off'].values[-1])} ms/step, "
                    f"on {ms(out['wall_on'].values[-1])} ms/step")
            after = await sink.stats()
    finally:
        sink.stop()
    spans = after["spans"] - before["spans"]
    per_step = spans / (reps * steps)
    wall_ratio = out["wall_on"].median / out["wall_off"].median
    cpu_ratio = out["cpu_on"].median / out["cpu_off"].median
    section = Section("P11 tracing cost")
    section.markdown += [
        f"{steps}-step runs (a think and one `{TOOL} view` per step, no LLM latency), {reps} of each, interleaved "
        "off, on, off, on; median (min-max). \"on\" exports every span over OTLP/HTTP (batched, the real "
        "exporter) to a receiver in another process, and its time includes flushing the run's spans.",
        "",
        "| tracing | wall ms/step | worker CPU ms/step |",
        "|---|---|---|",
        f"| off | {out['wall_off'].spread(1000)} | {out['cpu_off'].spread(1000)} |",
        f"| on | {out['wall_on'].spread(1000)} | {out['cpu_on'].spread(1000)} |",
        f"| on/off | **{wall_ratio:.2f}** | **{cpu_ratio:.2f}** |",
        "",
        f"The receiver got {spans} spans in {after['requests'] - before['requests']} requests "
        f"({(after['bytes'] - before['bytes']) / 1024:.0f} KiB): {per_step:.1f} spans per step "
        f"(expected {SPANS_PER_STEP}, plus the run's few). (CPU: the process clock ticks 10 ms.)",
    ]
    section.summary += [
        ("P11 tracing on/off per step, wall", f"{wall_ratio:.2f}", "-", "measured"),
        ("P11 tracing on/off per step, worker CPU", f"{cpu_ratio:.2f}", "-", "measured"),
    ]
    return section
