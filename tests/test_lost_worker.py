"""activities/lost_worker.py: a retry after a timed-out attempt moves the run
off its sticky queue; a retry after an ordinary failure leaves it there.

A worker that stays up stands in for the lost one: the first attempt goes
silent (no heartbeat) until the server times it out, exactly what the server
sees of a dead worker. Where the next workflow task goes is read from the
history: a WorkflowTaskScheduled event names the sticky or the normal queue.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

from temporalio import activity, workflow
from temporalio.api.enums.v1 import TaskQueueKind
from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment
from temporalio.worker import Worker

from activities.lost_worker import release_run_from_lost_worker


@activity.defn
async def released_on_retry(first_attempt: str) -> bool:
    if activity.info().attempt == 1:
        if first_attempt == "silent":
            await asyncio.sleep(60)  # no heartbeat: the server times the attempt out
        raise ApplicationError("a failure the worker reports", type="Flaky")
    return await release_run_from_lost_worker()


@workflow.defn(sandboxed=False)
class RetriedCallWorkflow:
    @workflow.run
    async def run(self, first_attempt: str) -> bool:
        return await workflow.execute_activity(
            released_on_retry,
            first_attempt,
            start_to_close_timeout=timedelta(seconds=60),
            heartbeat_timeout=timedelta(seconds=1),
            retry_policy=RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=2),
        )


async def run_once(client, first_attempt: str) -> tuple[bool, TaskQueueKind.ValueType]:
    """The activity's answer on its retry, and the queue kind of the workflow
    task scheduled after it completed."""
    queue = f"lost-worker-{uuid.uuid4().hex[:8]}"
    async with Worker(
        client, task_queue=queue, workflows=[RetriedCallWorkflow], activities=[released_on_retry],
        graceful_shutdown_timeout=timedelta(0),
    ):
        handle = await client.start_workflow(
            RetriedCallWorkflow.run, first_attempt, id=queue, task_queue=queue
        )
        released = await asyncio.wait_for(handle.result(), 60)
        history = await handle.fetch_history()
    events = list(history.events)
    completed = next(i for i, e in enumerate(events) if e.HasField("activity_task_completed_event_attributes"))
    task = next(e for e in events[completed:] if e.HasField("workflow_task_scheduled_event_attributes"))
    return released, task.workflow_task_scheduled_event_attributes.task_queue.kind


async def test_a_retry_after_a_timeout_sends_the_next_workflow_task_to_any_worker(dev_env):
    released, kind = await run_once(dev_env.client, "silent")
    assert released
    assert kind == TaskQueueKind.TASK_QUEUE_KIND_NORMAL


async def test_a_retry_after_a_reported_failure_keeps_the_sticky_queue(dev_env):
    released, kind = await run_once(dev_env.client, "fails")
    assert not released
    assert kind == TaskQueueKind.TASK_QUEUE_KIND_STICKY


async def test_outside_a_retry_nothing_is_asked():
    assert await ActivityEnvironment().run(release_run_from_lost_worker) is False
