"""Is any worker polling a task queue?"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client

POLLER_FRESHNESS = timedelta(seconds=70)
"""A poller seen this recently counts as alive (a long poll lasts up to ~60 s)."""


async def has_live_worker(client: Client, task_queue: str) -> bool:
    now = datetime.now(timezone.utc)
    for queue_type in (TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW, TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY):
        response = await client.workflow_service.describe_task_queue(
            DescribeTaskQueueRequest(
                namespace=client.namespace,
                task_queue=TaskQueue(name=task_queue),
                task_queue_type=queue_type,
            )
        )
        fresh = [
            p
            for p in response.pollers
            if now - p.last_access_time.ToDatetime(tzinfo=timezone.utc) < POLLER_FRESHNESS
        ]
        if not fresh:
            return False
    return True
