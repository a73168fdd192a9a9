"""A worker cut off from the server (its link dark, the worker still running)
neither eats a run's tool retries nor holds its next step (issue 25): three
hosts in network namespaces (testkit/netns_cluster.py), scenarios in
testkit/partition_driver.py. What holds it: the server pings idle client
connections and closes a dead one with its long polls (runtime/embedded_server.py
KEEPALIVE_*), so the cut-off worker is given no more work; a lost call is
scheduled again with fresh attempts (workflows/agent_tools.py); the cut-off
worker stops its calls itself (activities/server_contact.py); a workflow task
handed to it in the instant of the cut is retried after one workflow task
timeout (agent_model/continuation.py). Once the link heals, a's late results
change nothing and a takes work again (testkit/partition_heal.py)."""

from __future__ import annotations

import json
import os

import pytest

from agent_model.continuation import WORKFLOW_TASK_SECONDS
from testkit.netns_cluster import available
from testkit.partition_driver import RETRY_TARGET_SECONDS, Measurement, run_scenario
from testkit.partition_heal import heal_and_rejoin

WORKFLOW_TASK_STALL_TARGET_SECONDS = (WORKFLOW_TASK_SECONDS or 10.0) + 0.5
"""Issue 25 asks to cut the stall on workflow tasks sent to the cut-off worker: before the fix
it was the 10 s workflow task timeout, 20 s when the retried task went to the same stale poll.
Now a task handed to the worker in the instant of the cut costs one timeout, once."""

REPEATS = int(os.environ.get("DURABLE_MANUS_PARTITION_REPEATS", "10"))
"""Per scenario, as issue 25 asks (fewer by the variable, for a quick look)."""
HEAL_REPEATS = min(3, REPEATS)
"""The heal adds no timing target; a few repeats show it holds."""

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


@pytest.mark.parametrize("scenario", ["tool", "think", "between"])
async def test_partition(tmp_path, scenario):
    measurements = [await run_scenario(tmp_path / f"{scenario}-{n}", scenario, n) for n in range(REPEATS)]
    check(measurements)


async def test_after_the_partition_heals_a_late_results_change_nothing_and_a_takes_work_again(tmp_path):
    measurements = [
        await run_scenario(tmp_path / f"heal-{n}", "tool", n, then=heal_and_rejoin) for n in range(HEAL_REPEATS)
    ]
    check(measurements)
    for m in measurements:
        r = m.rejoin
        assert r is not None, m.line()
        assert r.heal_to_answers is not None, m.line()
        assert r.events_after_window == r.events_at_heal and r.events_at_end == r.events_at_heal, m.line()
        assert r.result_unchanged, m.line()
        assert not r.a_call_ended and r.a_runs_after_heal == 0, m.line()
        assert r.second_finished and r.a_alive, m.line()
        assert r.second_call_on == ["a"] and set(r.second_thinks_on) == {"a"}, m.line()
