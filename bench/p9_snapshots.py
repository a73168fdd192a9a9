"""P9 snapshots: what the per-step snapshot of a run directory costs
(activities/workspace_snapshots.py, taken by the worker after every call of a
tool that may change files), as a share of the step itself.

Two run directories: 200 files of 4 KiB, and the same with a 50 MB file
that never changes. Each step of the run is a think and one
`str_replace_editor insert` into one of the files (the cheapest real tool
that changes a file: no child process), so each snapshot has one changed
file to copy and 200 (or 201) to stat. The seeded files are snapshotted once
before the run (as a run's files are once, in the step that writes them).

(a) ms/step of that run with snapshots off (a worker whose snapshot
    interceptor snapshots no tool), (b) with them on (the default);
    interleaved, medians. (b)-(a) is what a snapshot adds to a step.
(c) the snapshot alone, called directly on the same directory after one
    file changed (median of many), the first snapshot of the directory
    (every file copied), and a restore of it into a new directory.
"""

from __future__ import annotations

import contextlib
import time

from temporalio.client import Client

from activities.snapshot_activities import SnapshotInterceptor
from activities.workspace import Workspace
from activities.workspace_snapshots import SnapshotStore
from agent_model.workspace_names import workspace_name_for
from testkit.run_results import final_result
from bench.common import Samples, bench_profile, bench_settings, check_result, log, ms, new_run_id, start_agent
from bench.context import Context, Section
from runtime import worker_factory

TOOL = "str_replace_editor"
CHANGED = "notes-000.txt"
INSERT = {"command": "insert", "path": CHANGED, "insert_line": 0, "new_str": "one more line"}
FILES = 200
FILE_BYTES = 4096
BIG_BYTES = 50 * 1024 * 1024


def seed(directory, big: bool) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for n in range(FILES):
        (directory / f"notes-{n:03d}.txt").write_text(f"file {n}\n" + "x" * (FILE_BYTES - 12) + "\n")
    if big:
        with open(directory / "big.bin", "wb") as out:
            for _ in range(BIG_BYTES // (1024 * 1024)):
                out.write(bytes(range(256)) * 4096)


@contextlib.contextmanager
def snapshots_off():
    """Workers built meanwhile snapshot no tool."""
    original = worker_factory.snapshot_interceptor
    worker_factory.snapshot_interceptor = lambda resources: SnapshotInterceptor(SnapshotStore(resources.workspace), {})
    try:
        yield
    finally:
        worker_factory.snapshot_interceptor = original


async def agent_ms_per_step(client: Client, ctx: Context, name: str, big: bool, steps: int, on: bool) -> float:
    root = ctx.workspace(name)
    settings = bench_settings(ctx.fake.base_url, root)
    run_id = new_run_id("bench-p9")
    seed(root / workspace_name_for(run_id), big)
    if on:  # files the run did not write are copied once, before it: measured in (c)
        SnapshotStore(Workspace(root)).snapshot(workspace_name_for(run_id), "seed", 0)
    with contextlib.nullcontext() if on else snapshots_off():
        worker = worker_factory.build_worker(client, settings)
    async with worker:
        began = time.perf_counter()
        handle = await start_agent(client, settings, bench_profile(steps, [TOOL]), {"tool": TOOL, "args": INSERT}, run_id=run_id)
        result = await final_result(handle)
        elapsed = time.perf_counter() - began
    check_result(result, steps, "P9 agent run")
    return elapsed / steps


def direct(ctx: Context, name: str, big: bool, reps: int) -> dict[str, Samples]:
    workspace = Workspace(ctx.workspace(name))
    store = SnapshotStore(workspace)
    directory = workspace.run_dir("direct")
    seed(directory, big)
    out = {k: Samples() for k in ("first", "step", "restore")}
    began = time.perf_counter()
    store.snapshot("direct", "direct", 0)
    out["first"].add(time.perf_counter() - began)
    for step in range(1, reps + 1):
        with open(directory / CHANGED, "a") as changed:
            changed.write(f"step {step}\n")
        began = time.perf_counter()
        store.snapshot("direct", "direct", step)
        out["step"].add(time.perf_counter() - began)
    for n in range(3):
        began = time.perf_counter()
        store.restore("direct", "direct", reps, f"restored-{n}")
        out["restore"].add(time.perf_counter() - began)
    out["blob_mib"] = store.blob_bytes("direct") / 1024**2  # type: ignore[assignment]
    return out


async def run(ctx: Context) -> Section:
    steps = 10 if ctx.quick else 30
    reps = 2 if ctx.quick else 4
    direct_reps = 20 if ctx.quick else 50
    rows = []
    for big in (False, True):
        label = f"{FILES} files" + (" + a 50 MB file, unchanged" if big else "")
        off, on = Samples(), Samples()
        await agent_ms_per_step(ctx.client, ctx, "p9-warm", big, 3, True)
        for rep in range(reps):
            off.add(await agent_ms_per_step(ctx.client, ctx, f"p9-off-{big}-{rep}", big, steps, False))
            on.add(await agent_ms_per_step(ctx.client, ctx, f"p9-on-{big}-{rep}", big, steps, True))
            log(f"P9 [{label}] rep {rep + 1}/{reps}: off {ms(off.values[-1])} ms/step, on {ms(on.values[-1])}")
        alone = direct(ctx, f"p9-direct-{big}", big, direct_reps)
        rows.append((label, off, on, alone))
    section = Section("P9 per-step snapshots")
    for label, off, on, _ in rows:
        section.summary.append((f"P9 snapshot cost per step, {label}", f"{ms(on.median - off.median)} ms", "-", ""))
    section.markdown += [
        f"{steps}-step runs, each step a think and one `{TOOL} insert` into one of the files, no LLM latency, "
        f"{reps} runs each way, interleaved; median (min-max). (c): the snapshot called directly after one "
        f"file changed, median of {direct_reps}; the first snapshot copies every file; the restore copies "
        "them all back into a new directory.",
        "",
        "| run directory | (a) ms/step, snapshots off | (b) ms/step, on (default) | (b)-(a) ms | (b)/(a) "
        "| (c) one snapshot, 1 file changed, ms | first snapshot, ms | restore, ms | blobs, MiB |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for label, off, on, alone in rows:
        section.markdown.append(
            f"| {label} | {off.spread(1000)} | {on.spread(1000)} | {ms(on.median - off.median)} | "
            f"**{on.median / off.median:.2f}** | {alone['step'].spread(1000)} | {ms(alone['first'].median)} | "
            f"{ms(alone['restore'].median)} | {alone['blob_mib']:.1f} |"
        )
    section.markdown += [
        "",
        "An unchanged file costs one lstat per snapshot (its size, mtime, ctime and inode match the previous "
        "manifest), so the 50 MB file is copied once, by the first snapshot, and never read again; a changed "
        "file is copied whole (no deltas), once per step it changes.",
    ]
    return section
