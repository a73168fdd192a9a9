"""The worker's side of snapshots: one after every call of a tool that may
change files (but a call that only reads, such as the editor's view), and the restore_workspace activity (forks, rewinds).

Snapshots are taken here, by a worker-wide activity interceptor, so the
workflow schedules nothing more for them: a run's commands are the same
with or without snapshots, and every recorded history replays. The call's
request names its step (ToolRequest.step); a request without one (a
workflow of older code) is not snapshotted. A snapshot that fails never
fails the call: it is logged, and a fork of that step restores the newest
snapshot before it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from temporalio import activity
from temporalio.worker import ActivityInboundInterceptor, ExecuteActivityInput, Interceptor

from activities.heartbeats import heartbeating
from activities.workspace_snapshots import SnapshotStore
from agent_model.activity_specs import RESTORE_WORKSPACE
from agent_model.fork import RestoreRequest, RestoreResult
from agent_model.tool_io import ToolRequest
from agent_model.tool_terms import reads_only

log = logging.getLogger(__name__)

T = TypeVar("T")


async def beating(work: Callable[[], T]) -> T:
    """Run blocking file work in a thread, heartbeating the activity meanwhile."""
    async with heartbeating():
        return await asyncio.to_thread(work)


class SnapshotInterceptor(Interceptor):
    """Snapshots the run directory after each call of the `tools` named, but
    those of their calls that only read (by the tool's read_calls rule)."""

    def __init__(self, store: SnapshotStore, tools: Mapping[str, Mapping[str, Sequence[str]]]) -> None:
        self.store, self.tools = store, dict(tools)

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _SnapshottingInbound(next, self)


class _SnapshottingInbound(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, owner: SnapshotInterceptor) -> None:
        super().__init__(next)
        self.owner = owner

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        request = input.args[0] if input.args else None
        tool = activity.info().activity_type
        due = (
            isinstance(request, ToolRequest)
            and request.step is not None
            and tool in self.owner.tools
            and not reads_only(self.owner.tools[tool], request.arguments)
        )
        try:
            return await super().execute_activity(input)
        finally:
            # Also after a failed call: it may have changed files before failing.
            if due:
                assert isinstance(request, ToolRequest) and request.step is not None
                await self._snapshot(request.workspace, request.step)

    async def _snapshot(self, name: str, step: int) -> None:
        workflow_id = activity.info().workflow_id or ""
        try:
            manifest = await beating(lambda: self.owner.store.snapshot(name, workflow_id, step))
        except Exception as e:  # noqa: BLE001 - a snapshot never fails the call it follows
            log.warning("snapshot of %s at step %s of %s failed: %s", name, step, workflow_id, e)
            return
        if manifest.skipped_count:
            log.warning(
                "snapshot of %s at step %s of %s left out %d path(s), e.g. %s",
                name, step, workflow_id, manifest.skipped_count, manifest.skipped[0],
            )


class SnapshotActivities:
    def __init__(self, store: SnapshotStore) -> None:
        self.store = store

    @activity.defn(name=RESTORE_WORKSPACE)
    async def restore_workspace(self, request: RestoreRequest) -> RestoreResult:
        """Bring a run directory back to a step's snapshot; its path and what could not come back."""
        return await beating(lambda: restore(self.store, request))


def restore(store: SnapshotStore, request: RestoreRequest) -> RestoreResult:
    done = store.restore(request.origin, request.workflow_id, request.step, request.into, request.earlier_than)
    if request.drop_later:
        store.drop_after(request.origin, request.workflow_id, request.step)
    if request.record_as is not None:
        store.snapshot(request.into, request.record_as, request.step)
    return RestoreResult(
        directory=str(done.directory),
        snapshot_step=done.snapshot_step,
        restored=done.restored,
        skipped=done.skipped,
        skipped_count=done.skipped_count,
    )

