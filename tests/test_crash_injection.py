"""Crash injection in the default suite, on the session's dev server: four
runs side by side, one per kill point (think, tool, between steps, a
PlanningFlow child), plus a fifth whose tool runs in the tool sandbox
(bubblewrap and a pids cgroup where the machine has them). Each run's worker.py
is SIGKILLed at its kill point and a fresh worker finishes the run. The N=20
version is bench/crash_injection.py; testkit/crash_driver.py says what is checked.

The seed is random unless CRASH_SEED is set; it is printed, and named in every
failure message, so a failing draw can be replayed with CRASH_SEED=<seed>.
"""

from __future__ import annotations

import os
import random

import pytest

from testkit.crash_driver import KINDS, RESUME_LIMIT_SECONDS, Summary, plan_runs, run_crash_injection
from testkit.e2e import server_address

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
async def crash(dev_env, tmp_path_factory) -> tuple[Summary, str]:
    seed = int(os.environ.get("CRASH_SEED") or random.SystemRandom().randrange(1_000_000))
    print(f"\ncrash injection seed: {seed} (replay with CRASH_SEED={seed})")
    sandboxed = plan_runs(1, seed, ("tool",), prefix="crash-sandboxed", tool_sandbox="auto")
    summary = await run_crash_injection(
        dev_env.client,
        server_address(dev_env),
        tmp_path_factory.mktemp("crash"),
        n=len(KINDS),
        seed=seed,
        concurrency=len(KINDS) + 1,
        extra=sandboxed,
    )
    report = summary.report()
    print(report)
    why = f"seed {seed}\n{report}\n" + "\n".join(o.error for o in summary.outcomes if o.error)
    return summary, why


def killed_a_tool(o) -> bool:
    return o.plan.kind == "tool" or (o.plan.kind == "flow" and o.plan.flow_target == "tool")


async def test_crash_injection_one_run_per_kill_point(crash):
    summary, why = crash
    assert sorted(o.plan.kind for o in summary.outcomes) == sorted([*KINDS, "tool"]), why
    assert all(o.error is None for o in summary.outcomes), why
    assert summary.finished == summary.started == len(KINDS) + 1, why
    assert summary.think_repeats == 0, why
    assert summary.tool_repeats == 0, why
    assert summary.unexplained_executions == 0, why
    assert summary.child_runs_repeated == 0, why
    assert not any(o.orphans for o in summary.outcomes), why
    assert len(summary.resumes) == summary.started, why
    assert max(summary.resumes) < RESUME_LIMIT_SECONDS, why

    for o in summary.outcomes:
        if killed_a_tool(o):
            # The tool was killed mid-run, ran again on the new worker, and the
            # server noticed the dead attempt through its heartbeat timeout.
            assert o.tool_processes_at_kill >= 1, why
            assert (o.killed_mid_run, o.in_flight_reruns) == (1, 1), why
            assert any(r.endswith("python_execute:HEARTBEAT") for r in o.heartbeat_retries), why
        elif o.plan.kind in ("think", "flow"):
            # The killed think call never delivered its reply; its retry did.
            assert o.lost_thinks == 1 and o.killed_mid_run == 0, why
            assert any(r.endswith("think:HEARTBEAT") for r in o.heartbeat_retries), why
        else:  # between: no tool was running, none ran twice
            assert o.killed_mid_run == 0 and o.in_flight_reruns == 0, why


async def test_a_sandboxed_tool_dies_with_its_worker(crash):
    summary, why = crash
    (o,) = [o for o in summary.outcomes if o.plan.tool_sandbox != "none"]
    assert o.error is None and o.finished, why
    assert o.tool_processes_at_kill >= 1 and not o.orphans, why
    assert (o.killed_mid_run, o.in_flight_reruns, o.tool_repeats) == (1, 1, 0), why


async def test_a_killed_sandboxed_call_leaves_no_cgroup_behind(crash):
    summary, why = crash
    (o,) = [o for o in summary.outcomes if o.plan.tool_sandbox != "none"]
    if not o.cgroups_at_kill:
        pytest.skip("no pids cgroup for tool calls on this machine")
    assert o.cgroups_left == [], why
