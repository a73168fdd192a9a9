"""What both peer programs share, apart from their agent: the command line,
the editor tool's file view, the run requests they read and the measurement
they print. Standard library and temporalio only: it runs in each peer's venv.

A peer program starts its worker, prints READY, then reads one JSON request
per line on stdin, {"run_id": ..., "task": ..., "steps": N}, runs the agent
once per request (the task carries the fake LLM's script: N tool-call turns,
then a final answer) and prints one JSON line per run:

    {"steps": N, "wall": s, "cpu": s, "events": n, "bytes": n,
     "activities": {"type": count, ...}, "output": "..."}

wall is from starting the workflow to its result; cpu is this process's user
+ system CPU over the same span (the worker, its activities and the client);
events and bytes are the run's history (fetch_history: the protobuf size of
its events); activities counts the activities it scheduled, by type. A failed run prints {"error": "one line"} instead. The program
ends when stdin closes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path

from temporalio.client import WorkflowHandle

NOTES = "notes.txt"
NOTES_TEXT = "".join(f"line {i}: a small file for the benchmark's view calls\n" for i in range(1, 6))
"""The file each view call reads: the one P1's editor steps view."""
TOOL_TIMEOUT = timedelta(seconds=30)
"""Start-to-close of a view activity: it reads one small file."""
MAX_OBSERVATION = 10_000
"""Characters of a view the model sees, as durable-manus's manus profile clips."""


def parse_args(description: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--server", required=True, help="Temporal frontend address, host:port")
    parser.add_argument("--base-url", required=True, help="the fake LLM's /v1 URL")
    parser.add_argument("--task-queue", required=True)
    return parser.parse_args()


class Workdir:
    """The temp dir the editor tool works in, with the file it views."""

    def __init__(self) -> None:
        self._holder = tempfile.TemporaryDirectory(prefix="bench-peer-")
        self.path = Path(self._holder.name)
        (self.path / NOTES).write_text(NOTES_TEXT)

    def view(self, command: str, path: str) -> str:
        """The editor's `view`, as durable-manus shows a file: `cat -n` lines."""
        if command != "view":
            return f"Error: only `view` is available here, not {command!r}"
        target = (self.path / path).resolve()
        if self.path.resolve() not in target.parents:
            return f"Error: {path} is outside the working directory"
        try:
            lines = target.read_text(errors="replace").splitlines()
        except OSError as exc:
            return f"Error: {path}: {exc.strerror}"
        numbered = "\n".join(f"{n:6}\t{line}" for n, line in enumerate(lines, 1))
        return f"{path}, lines 1-{len(lines)} of {len(lines)}:\n{numbered}"[:MAX_OBSERVATION]

    def close(self) -> None:
        self._holder.cleanup()


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def measure(start: Callable[[], Awaitable[WorkflowHandle]], steps: int) -> dict:
    """Start one run, wait for its result and report what it cost."""
    cpu_before, began = cpu_seconds(), time.perf_counter()
    handle = await start()
    output = await handle.result()
    wall, cpu = time.perf_counter() - began, cpu_seconds() - cpu_before
    history = await handle.fetch_history()
    activities: dict[str, int] = {}
    for event in history.events:
        if event.HasField("activity_task_scheduled_event_attributes"):
            kind = event.activity_task_scheduled_event_attributes.activity_type.name
            activities[kind] = activities.get(kind, 0) + 1
    return {
        "steps": steps,
        "wall": wall,
        "cpu": cpu,
        "events": len(history.events),
        "bytes": sum(event.ByteSize() for event in history.events),
        "activities": activities,
        "output": str(output)[:200],
    }


async def serve(run: Callable[[str, str, int], Awaitable[WorkflowHandle]]) -> None:
    """READY, then one measured run per request line until stdin closes.
    run(run_id, task, steps) starts the workflow and returns its handle."""
    print("READY", flush=True)
    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            return
        try:
            request = json.loads(line)
            steps = int(request["steps"])
            report = await measure(lambda: run(request["run_id"], request["task"], steps), steps)
        except Exception as exc:  # reported to the benchmark, which stops with it
            report = {"error": f"{type(exc).__name__}: {exc}".splitlines()[0][:500]}
        print(json.dumps(report), flush=True)
