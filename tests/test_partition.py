"""A worker cut off from the server (its link dark, the worker still running)
neither eats a run's tool retries nor holds its next step (issue 25): three
hosts in network namespaces (testkit/netns_cluster.py), scenarios in
testkit/partition_driver.py. The assertions are the issue's targets; today's
behaviour misses them, hence xfail until the fix lands."""

from __future__ import annotations

import json

import pytest

from testkit.netns_cluster import available
from testkit.partition_driver import RETRY_TARGET_SECONDS, Measurement, run_scenario

WORKFLOW_TASK_STALL_TARGET_SECONDS = 5.0
"""Issue 25 asks to cut the stall on workflow tasks sent to the cut-off worker; today it is the
10 s workflow task timeout (20 s when the retried task goes to the same stale poll). Half of it."""

REPEATS = 3
"""Per scenario; the issue asks for 10 once the fix makes each run short."""

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not available(), reason="needs root and `ip netns`"),
    pytest.mark.timeout(REPEATS * 200),
]


def check(measurements: list[Measurement]) -> None:
    for m in measurements:
        print(m.line())
    print(json.dumps([m.as_json() for m in measurements]))
    for m in measurements:
        assert not m.error, m.error
        assert m.finished, m.line()
        assert m.cut_to_b is not None and m.cut_to_b <= RETRY_TARGET_SECONDS, m.line()
        assert not m.error_seen, m.line()
        assert not m.overlap, m.line()
        assert m.workflow_task_stall < WORKFLOW_TASK_STALL_TARGET_SECONDS, m.line()


@pytest.mark.xfail(strict=False, reason="issue 25: lost attempts use up the retry budget; a stale poll holds the step")
@pytest.mark.parametrize("scenario", ["tool", "think", "between"])
async def test_partition(tmp_path, scenario):
    measurements = [await run_scenario(tmp_path / f"{scenario}-{n}", scenario, n) for n in range(REPEATS)]
    check(measurements)
