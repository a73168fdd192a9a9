"""A rewind's files: before the run is reset to the end of step N, its
directory is restored to that step's snapshot (workflows/restore_workspace.py,
on a worker of the run's task queue), and the snapshots of the steps after N
are dropped."""

from __future__ import annotations

import uuid
from typing import TextIO

from temporalio.client import Client

from agent_model.fork import RestoreRequest, RestoreResult
from workflows.restore_workspace import RestoreWorkspaceWorkflow


async def restore_for_rewind(
    client: Client, run_id: str, workspace: str, step: int, task_queue: str, out: TextIO
) -> RestoreResult:
    print(
        f"restoring the files of {run_id} to the end of step {step} "
        f"(waiting for a worker on task queue {task_queue})",
        file=out,
        flush=True,
    )
    result = await client.execute_workflow(
        RestoreWorkspaceWorkflow.run,
        RestoreRequest(origin=workspace, workflow_id=run_id, step=step, into=workspace, drop_later=True),
        id=f"{run_id}-restore-{uuid.uuid4().hex[:8]}",
        task_queue=task_queue,
    )
    if result.snapshot_step is None:
        print(f"no snapshot of {run_id} at or before step {step}: its directory is now empty", file=out)
    for line in result.skipped[:5]:
        print(f"not restored: {line}", file=out)
    if result.skipped_count > 5:
        print(f"... and {result.skipped_count - 5} more not restored", file=out)
    return result
