"""A worker whose prepare_workspace waits until the test lets it go: holds a
new run in its first workflow task, where the run makes its directory (a local
activity since WORKSPACE_IN_FIRST_TASK_PATCH; before it an activity task, where
a cancel used to close the run with that call still open: agent_model/activity_specs.py
WORKSPACE_CANCEL_PATCH)."""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from pathlib import Path
from typing import AsyncIterator

from temporalio import activity
from temporalio.client import Client
from temporalio.worker import Worker

from agent_model.activity_specs import PREPARE_WORKSPACE
from runtime.worker_factory import WORKFLOWS, sandboxed_runner


class HeldWorkspace:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.started = asyncio.Event()
        self.released = asyncio.Event()

    @activity.defn(name=PREPARE_WORKSPACE)
    async def prepare_workspace(self, name: str) -> str:
        self.started.set()
        await self.released.wait()
        directory = self.root / name
        directory.mkdir(parents=True, exist_ok=True)
        return str(directory)


@asynccontextmanager
async def held_workspace_worker(client: Client, task_queue: str, root: Path, **options: object) -> AsyncIterator[HeldWorkspace]:
    """A worker of the product's workflows with only the held activity: the
    run goes no further than preparing its directory."""
    held = HeldWorkspace(root)
    worker = Worker(
        client,
        task_queue=task_queue,
        workflows=WORKFLOWS,
        activities=[held.prepare_workspace],
        workflow_runner=sandboxed_runner(),
        **options,  # type: ignore[arg-type]
    )
    async with worker:
        yield held
        held.released.set()  # let a held call end before the worker shuts down
