"""P5 long run: a run of thousands of steps of 10 KB observations finishes
under the server's default limits, because it continues as new.

Each step views a 10,000-character file with str_replace_editor (no sandbox
start per step, so the run measures the loop and its history, not process
start-up). The run is left to decide when to continue as new (server
suggestion, or agent_model/continuation.py's own bounds). Reports: the
executions the run took, the largest execution's history (events, bytes)
against the server's defaults (51,200 events, 50 MiB), the whole chain's
history against the content, and the wall time per step.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from agent_model.run import AgentRunInput, AgentRunResult
from testkit.run_results import final_result
from bench.common import bench_profile, bench_settings, check_result, log, task_for
from bench.context import Context, Section
from config.settings import Settings
from runtime.worker_factory import build_worker
from workflows import search_attributes
from workflows.agent import AgentWorkflow

STEPS, QUICK_STEPS = 3000, 300
FILE_LINES, LINE_CHARS = 125, 80
"""The viewed file: 125 lines of 79 characters and a newline (10,000 characters)."""
SERVER_EVENT_LIMIT = 51_200
SERVER_BYTES_LIMIT = 50 * 2**20


@dataclass
class LongRun:
    steps: int
    executions: int
    largest_events: int
    largest_bytes: int
    total_bytes: int
    content: int
    seconds: float


def write_viewed_file(run_dir: Path) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    lines = [f"{n:05d} " + "abcdefghij" * 7 + "klmnopqr" for n in range(FILE_LINES)]
    (run_dir / "data.txt").write_text("".join(line[: LINE_CHARS - 1] + "\n" for line in lines))


async def execution_sizes(client: Client, workflow_id: str, first_run_id: str) -> list[tuple[int, int]]:
    """(events, history bytes) of each execution of the run, first to last."""
    sizes, run_id = [], first_run_id
    while run_id:
        handle = client.get_workflow_handle(workflow_id, run_id=run_id)
        info = (await handle.describe()).raw_description.workflow_execution_info
        sizes.append((info.history_length, info.history_size_bytes))
        history = await handle.fetch_history()
        last = history.events[-1]
        run_id = (
            last.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
            if last.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW
            else ""
        )
    return sizes


async def long_run(client: Client, settings: Settings, steps: int) -> LongRun:
    """One run of `steps` editor views on a worker of this process (it ends at max_steps)."""
    workspace = f"long-{uuid.uuid4().hex[:8]}"
    write_viewed_file(settings.workspace_root / workspace)
    profile = bench_profile(steps, ["str_replace_editor"], max_observe=12_000)
    script = {"tool": "str_replace_editor", "args": {"command": "view", "path": "data.txt"}, "run": workspace}
    began = time.perf_counter()
    async with build_worker(client, settings):
        started = await client.start_workflow(
            AgentWorkflow.run,
            AgentRunInput(task=task_for(script), profile=profile, workspace=workspace),
            id=workspace,
            task_queue=settings.task_queue,
            search_attributes=search_attributes.initial(profile.name),
        )
        # Not bound to the first execution: the result is the chain's.
        result: AgentRunResult = await final_result(client.get_workflow_handle(started.id, result_type=AgentRunResult))
    seconds = time.perf_counter() - began
    check_result(result, steps, "P5 long run")
    sizes = await execution_sizes(client, started.id, started.first_execution_run_id)
    return LongRun(
        steps=result.steps_taken,
        executions=len(sizes),
        largest_events=max(events for events, _ in sizes),
        largest_bytes=max(size for _, size in sizes),
        total_bytes=sum(size for _, size in sizes),
        content=steps * FILE_LINES * LINE_CHARS,
        seconds=seconds,
    )


async def run(ctx: Context) -> Section:
    steps = QUICK_STEPS if ctx.quick else STEPS
    settings = bench_settings(ctx.fake.base_url, ctx.workspace("p5"))
    report = await long_run(ctx.client, settings, steps)
    log(f"P5 {report.steps} steps in {report.executions} executions, {report.seconds:.0f} s")
    mib = 2**20
    section = Section("P5 long run")
    section.markdown += [
        f"One run of {steps:,} steps, each viewing a {FILE_LINES * LINE_CHARS:,}-character file with "
        "str_replace_editor (observations of ~10 KB) (the run ends at its step limit); manus prompts, memory window of "
        "100 messages, one worker, dev server with its default limits.",
        "",
        "| steps | executions | largest execution: events / history | all executions: history | history / content | ms/step |",
        "|---|---|---|---|---|---|",
        f"| {report.steps:,} | {report.executions} | {report.largest_events:,} / {report.largest_bytes / mib:.1f} MiB | "
        f"{report.total_bytes / mib:.1f} MiB | {report.total_bytes / report.content:.2f} | "
        f"{1000 * report.seconds / report.steps:.0f} |",
        "",
        f"The server's defaults end a run at {SERVER_EVENT_LIMIT:,} events or {SERVER_BYTES_LIMIT // mib} MiB of "
        "history; every execution stays far below (agent_model/continuation.py).",
    ]
    section.summary.append((
        f"P5 {steps:,}-step run (10 KB/step)",
        f"finished, {report.executions} executions, largest {report.largest_bytes / mib:.1f} MiB",
        "finishes",
        "met" if report.largest_bytes < SERVER_BYTES_LIMIT and report.largest_events < SERVER_EVENT_LIMIT else "MISSED",
    ))
    return section
