"""activities/heartbeats.py: the cadence comes from the activity's heartbeat
timeout, the beats reach the server, and they carry a cancellation back."""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from datetime import timedelta

import pytest
from temporalio import activity, workflow
from temporalio.client import WorkflowFailureError
from temporalio.common import RetryPolicy
from temporalio.exceptions import CancelledError
from temporalio.testing import ActivityEnvironment
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from activities.heartbeats import MAX_INTERVAL, MIN_INTERVAL, beat_interval, heartbeating

HEARTBEAT_TIMEOUT = timedelta(seconds=3)
QUIET_SECONDS = 3 * HEARTBEAT_TIMEOUT.total_seconds()
"""How long the activity runs without beating itself: three heartbeat timeouts."""
MARKER = "still here"


def test_the_interval_comes_from_the_heartbeat_timeout() -> None:
    assert beat_interval(timedelta(seconds=3)) == pytest.approx(1.0)
    assert beat_interval(timedelta(seconds=0.6)) == pytest.approx(0.2)
    assert beat_interval(timedelta(seconds=0.01)) == MIN_INTERVAL
    assert beat_interval(timedelta(minutes=5)) == MAX_INTERVAL  # a cancellation still arrives soon
    assert beat_interval(None) == MAX_INTERVAL


beat_times: dict[str, list[float]] = {}


@activity.defn
async def quiet_work(key: str) -> int:
    """Waits QUIET_SECONDS without a heartbeat of its own."""
    times = beat_times.setdefault(key, [])
    async with heartbeating(MARKER, on_beat=lambda: times.append(time.monotonic())):
        await asyncio.sleep(QUIET_SECONDS)
    return len(times)


@activity.defn
async def endless_work(key: str) -> str:
    try:
        async with heartbeating():
            await asyncio.sleep(3600)
    except asyncio.CancelledError:
        beat_times[key] = [time.monotonic()]
        raise
    return "never"


@workflow.defn(sandboxed=False)
class HeartbeatWorkflow:
    @workflow.run
    async def run(self, activity_name: str, key: str) -> int | str:
        return await workflow.execute_activity(
            activity_name,
            key,
            start_to_close_timeout=timedelta(seconds=120),
            heartbeat_timeout=HEARTBEAT_TIMEOUT,
            retry_policy=RetryPolicy(maximum_attempts=1),  # a missed heartbeat timeout fails the test
            cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
        )


async def start(dev_env, activity_name: str):
    queue = f"beats-{uuid.uuid4().hex[:8]}"
    key = uuid.uuid4().hex
    worker = Worker(
        dev_env.client,
        task_queue=queue,
        workflows=[HeartbeatWorkflow],
        activities=[quiet_work, endless_work],
        workflow_runner=UnsandboxedWorkflowRunner(),
        max_heartbeat_throttle_interval=timedelta(seconds=1),  # as the product's worker
    )
    handle = await dev_env.client.start_workflow(
        HeartbeatWorkflow.run, args=[activity_name, key], id=f"beats-{key[:8]}", task_queue=queue
    )
    return worker, handle, key


async def pending_heartbeat(handle) -> list:
    """The details of the run's pending activity's last heartbeat, as the server has them."""
    description = await handle.describe()
    pending = description.raw_description.pending_activities
    return list(pending[0].heartbeat_details.payloads) if pending and pending[0].HasField("heartbeat_details") else []


async def test_an_activity_that_only_waits_outlives_three_heartbeat_timeouts(dev_env) -> None:
    worker, handle, key = await start(dev_env, "quiet_work")
    async with worker:
        deadline = time.monotonic() + 60
        while not await pending_heartbeat(handle):
            assert time.monotonic() < deadline, "the server never saw a heartbeat"
            await asyncio.sleep(0.2)
        assert MARKER.encode() in (await pending_heartbeat(handle))[0].data
        beats = await handle.result()
    times = beat_times.pop(key)
    gaps = [later - earlier for earlier, later in zip(times, times[1:])]
    # About one beat a second (3 s / 3); bounds generous enough for a loaded machine.
    assert QUIET_SECONDS / 3 <= beats <= QUIET_SECONDS / MIN_INTERVAL
    assert sum(gaps) / len(gaps) == pytest.approx(beat_interval(HEARTBEAT_TIMEOUT), rel=0.5)


async def test_a_cancellation_reaches_an_activity_through_its_beats(dev_env) -> None:
    worker, handle, key = await start(dev_env, "endless_work")
    async with worker:
        deadline = time.monotonic() + 60
        while not (await handle.describe()).raw_description.pending_activities:
            assert time.monotonic() < deadline, "the activity never started"
            await asyncio.sleep(0.2)
        await handle.cancel()
        with pytest.raises(WorkflowFailureError) as failed:
            await handle.result()
    assert isinstance(failed.value.cause, CancelledError)
    # The workflow waited for the activity to end (WAIT_CANCELLATION_COMPLETED), which saw the cancellation.
    assert key in beat_times
    beat_times.pop(key)


def beats_of(seconds: float, *, is_local: bool = False) -> list[tuple]:
    """The heartbeats an activity sends that sits in heartbeating() for `seconds`."""
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, heartbeat_timeout=timedelta(seconds=0.6), is_local=is_local)
    beats: list[tuple] = []
    env.on_heartbeat = lambda *details: beats.append(details)

    async def work() -> None:
        async with heartbeating():
            await asyncio.sleep(seconds)

    asyncio.run(env.run(work))
    return beats


def test_a_short_call_sends_no_heartbeat():
    """Each beat is a write on the server; a call shorter than one interval (0.2 s here) needs none."""
    assert beats_of(0.05) == []


def test_a_longer_call_beats_every_interval():
    assert 3 <= len(beats_of(1.0)) <= 5


def test_a_local_activity_never_beats():
    assert beats_of(1.0, is_local=True) == []
