"""A retried call moves its run off the lost worker's sticky queue.

Temporal sends a run's workflow tasks to the sticky queue of the worker that
ran its last one (that worker has the run in memory). When that worker is
gone, the server keeps using the queue until it has seen no poll on it for
10 s (fixed in the server) and then lets each task wait there for the
worker's sticky schedule-to-start timeout (10 s by default) before moving it.
The heartbeat timeouts notice a dead worker in 4 s, so the retried call
completes well within those 10 s, and the workflow task its completion
schedules would sit on the dead worker's queue for another ~10 s
(BENCHMARKS.md, P4).

So the retry of a call whose previous attempt timed out (its worker went
silent) asks the server to forget the run's sticky queue, and its parent's
(a PlanningFlow's), before doing its work: the next workflow task then goes to
the run's task queue, where a live worker takes it at once and replays the
history (which it lacks anyway). A
retry after an ordinary failure (a 429, a 500) leaves the sticky queue alone:
its worker is alive and keeps the run in memory. Best effort: the run only
waits longer if the server cannot be asked.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import activity
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import TimeoutType
from temporalio.api.workflowservice.v1 import DescribeWorkflowExecutionRequest, ResetStickyTaskQueueRequest

LOST_WORKER_TIMEOUTS = {TimeoutType.TIMEOUT_TYPE_HEARTBEAT, TimeoutType.TIMEOUT_TYPE_START_TO_CLOSE}
"""How an attempt ends when its worker died, froze or lost the server."""

ASK_SECONDS = 2.0
"""Longest time a retry spends asking the server (two calls, normally a few
ms); less than the heartbeat timeouts, since nothing heartbeats meanwhile."""


async def release_run_from_lost_worker() -> bool:
    """On a retry whose previous attempt timed out, clear the run's sticky
    queue. True if it was cleared."""
    if not activity.in_activity():
        return False
    info = activity.info()
    if info.attempt <= 1 or info.is_local or not info.workflow_id or not info.workflow_run_id:
        return False
    try:
        client = activity.client()
    except RuntimeError:  # run outside a worker (tests)
        return False
    execution = WorkflowExecution(workflow_id=info.workflow_id, run_id=info.workflow_run_id)
    service = client.workflow_service
    rpc_timeout = timedelta(seconds=ASK_SECONDS)
    try:
        async with asyncio.timeout(ASK_SECONDS):
            description = await service.describe_workflow_execution(
                DescribeWorkflowExecutionRequest(namespace=info.namespace, execution=execution),
                timeout=rpc_timeout,
            )
            pending = next(
                (p for p in description.pending_activities if p.activity_id == info.activity_id), None
            )
            failure = pending.last_failure if pending is not None else None
            if (
                failure is None
                or not failure.HasField("timeout_failure_info")
                or failure.timeout_failure_info.timeout_type not in LOST_WORKER_TIMEOUTS
            ):
                return False
            # A PlanningFlow's child: its flow ran on the same worker, and the
            # child's completion would wait on that worker's queue as well.
            parent = description.workflow_execution_info.parent_execution
            for run in [execution] + ([parent] if parent.workflow_id else []):
                await service.reset_sticky_task_queue(
                    ResetStickyTaskQueueRequest(namespace=info.namespace, execution=run),
                    timeout=rpc_timeout,
                )
    except Exception as e:  # noqa: BLE001 - best effort: the run then waits for the server's own fallback
        activity.logger.warning("could not move the run off its lost worker's sticky queue: %s", e)
        return False
    activity.logger.info("previous attempt timed out: the run's next workflow task goes to any worker")
    return True
