"""Is a worker alive on a task queue, and is a run waiting for one?

The server lists a task queue's pollers for about 70 s after their last poll
began, and an idle worker's long poll lasts up to 60 s, so the list alone
cannot tell a live worker from one that exited a minute ago. Two fresher kinds
of evidence are used instead: a poller on this machine whose process is gone
is dead (a worker's default identity is `pid@hostname`), and a run whose next
task stays untaken for a few seconds has no worker, whatever the list says.
"""

from __future__ import annotations

import os
import socket
from datetime import datetime, timedelta, timezone
from pathlib import Path

from temporalio.api.enums.v1 import PendingActivityState, PendingWorkflowTaskState, TaskQueueType, WorkflowExecutionStatus
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest, DescribeWorkflowExecutionResponse
from temporalio.client import Client

POLLER_FRESHNESS = timedelta(seconds=70)
"""A poller seen this recently may be alive (a long poll lasts up to ~60 s)."""


def process_gone(identity: str, hostname: str | None = None) -> bool:
    """True when `identity` names a process of this machine that no longer runs.
    An identity of another machine, or of a form not `pid@host`, proves nothing."""
    pid, _, host = identity.partition("@")
    if host != (hostname or socket.gethostname()) or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    try:  # a zombie has exited; only its exit status is left to collect
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return False


async def live_workers(client: Client, task_queue: str) -> list[str]:
    """Identities of the workers that may be polling `task_queue` for both
    workflow and activity tasks; empty when certainly none is."""
    now = datetime.now(timezone.utc)
    per_type = []
    for queue_type in (TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW, TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY):
        response = await client.workflow_service.describe_task_queue(
            DescribeTaskQueueRequest(
                namespace=client.namespace,
                task_queue=TaskQueue(name=task_queue),
                task_queue_type=queue_type,
            )
        )
        per_type.append(
            {
                p.identity
                for p in response.pollers
                if now - p.last_access_time.ToDatetime(tzinfo=timezone.utc) < POLLER_FRESHNESS
                and not process_gone(p.identity)
            }
        )
    if not all(per_type):
        return []
    return sorted(per_type[0] | per_type[1])


def waits_for_worker(description: DescribeWorkflowExecutionResponse, now: datetime | None = None) -> bool:
    """True when the run has a task that a worker could take now and none has:
    a scheduled workflow task, or an activity due (not in a retry's backoff)."""
    if description.workflow_execution_info.status != WorkflowExecutionStatus.WORKFLOW_EXECUTION_STATUS_RUNNING:
        return False
    if (
        description.HasField("pending_workflow_task")
        and description.pending_workflow_task.state == PendingWorkflowTaskState.PENDING_WORKFLOW_TASK_STATE_SCHEDULED
    ):
        return True
    now = now or datetime.now(timezone.utc)
    for activity in description.pending_activities:
        if activity.state != PendingActivityState.PENDING_ACTIVITY_STATE_SCHEDULED:
            continue
        if activity.HasField("next_attempt_schedule_time"):
            if activity.next_attempt_schedule_time.ToDatetime(tzinfo=timezone.utc) > now:
                continue  # waiting out a retry's backoff, not a worker
        return True
    return False


def picked_up(description: DescribeWorkflowExecutionResponse) -> bool:
    """True once a worker has taken the run's first workflow task (or the run ended)."""
    if description.workflow_execution_info.status != WorkflowExecutionStatus.WORKFLOW_EXECUTION_STATUS_RUNNING:
        return True
    return not (
        description.HasField("pending_workflow_task")
        and description.pending_workflow_task.state == PendingWorkflowTaskState.PENDING_WORKFLOW_TASK_STATE_SCHEDULED
        and description.workflow_execution_info.history_length <= 2
    )
