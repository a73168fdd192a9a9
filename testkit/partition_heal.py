"""The partition heals (issue 25): the follow-up of the `tool` scenario
(testkit/partition_driver.py), once its run completed on b.

1. a's link comes back; a logs that the server answers again
   (activities/server_contact.py), within HEAL_ANSWER_TIMEOUT_SECONDS.
2. a's late results change nothing: the first run's history gains no event
   (counted at the heal, LATE_RESULT_WINDOW_SECONDS after a answered, and
   after the second run), its result is the same, a's killed execution of the
   call never wrote "end", and no execution of it started on a after the heal.
3. a rejoins: b is killed, a second run starts on the same task queue; it
   completes, its call (the program log's netns inode) and its thinks (the
   fake's peer address) on a.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from temporalio.client import WorkflowHandle

from agent_model.state import AgentState, StopReason
from testkit.crash_driver import read_history
from testkit.e2e import wait_until
from testkit.fake_openai import python, terminate
from testkit.partition_driver import AfterTheRun, program, program_events, start_run, task_text
from testkit.run_results import final_result

LOST_LINE = "no answer from the Temporal server"
ANSWERS_AGAIN_LINE = "answers again"
"""activities/server_contact.py's lines: contact lost, contact back."""
HEAL_ANSWER_TIMEOUT_SECONDS = 30.0
"""Measured 1.7-2.4 s after a ~5 s partition; a longer one backs TCP's retransmissions off further."""
LATE_RESULT_WINDOW_SECONDS = 5.0
"""How long after a answered the history must stay unchanged: a result a held back is
re-sent within the SDK client's longest retry interval (temporalio RetryConfig, 5 s).
Only a time bound can wait for nothing to happen."""
SECOND_RUN_TIMEOUT_SECONDS = 60.0
"""The second run takes a few seconds; its first workflow task may wait out one timeout (10 s)."""


@dataclass
class Rejoin:
    heal_to_answers: float | None = None
    """Seconds from the heal to a's "answers again" line."""
    events_at_heal: int = 0
    events_after_window: int = 0
    events_at_end: int = 0
    """The first run's history events: at the heal, LATE_RESULT_WINDOW_SECONDS after a
    answered again, and after the second run completed."""
    result_unchanged: bool = False
    a_call_ended: bool = False
    """a's (killed) execution of the first run's call wrote "end"."""
    a_runs_after_heal: int = 0
    """Executions of the first run's call that started on a after the heal."""
    second_finished: bool = False
    heal_to_second_done: float | None = None
    second_took: float | None = None
    """Seconds from the second run's start to its completion."""
    second_call_on: list[str] = field(default_factory=list)
    """The host of each execution of the second run's call."""
    second_thinks_on: list[str] = field(default_factory=list)
    a_alive: bool = False
    """Worker a still running at the end."""

    def line(self) -> str:
        def s(v: float | None) -> str:
            return "-" if v is None else f"{v:.1f}s"

        return (
            f"heal->answers {s(self.heal_to_answers)} heal->second done {s(self.heal_to_second_done)} "
            f"(the run took {s(self.second_took)}) "
            f"events {self.events_at_heal}/{self.events_after_window}/{self.events_at_end} "
            f"result same {self.result_unchanged} a's call ended {self.a_call_ended} "
            f"a reran it {self.a_runs_after_heal} second {'done' if self.second_finished else 'NOT done'} "
            f"call@{','.join(self.second_call_on) or '-'} thinks@{','.join(self.second_thinks_on) or '-'} "
            f"a alive {self.a_alive}"
        )


async def _event_count(handle: WorkflowHandle) -> int:
    return len((await handle.fetch_history()).events)


async def heal_and_rejoin(after: AfterTheRun) -> None:
    cluster, log = after.cluster, after.log
    r = after.m.rejoin = Rejoin()
    a = cluster.workers["a"]
    await wait_until(
        lambda: a.stderr().count(LOST_LINE) > a.stderr().count(ANSWERS_AGAIN_LINE), HEAL_ANSWER_TIMEOUT_SECONDS,
        "worker a to say it lost the server",
    )
    answered_before = a.stderr().count(ANSWERS_AGAIN_LINE)

    r.events_at_heal = await _event_count(after.handle)
    heal_at = cluster.heal("a")
    await wait_until(
        lambda: a.stderr().count(ANSWERS_AGAIN_LINE) > answered_before, HEAL_ANSWER_TIMEOUT_SECONDS,
        "worker a to say the server answers again",
    )
    r.heal_to_answers = time.time() - heal_at
    await asyncio.sleep(LATE_RESULT_WINDOW_SECONDS)
    r.events_after_window = await _event_count(after.handle)
    r.result_unchanged = await final_result(after.handle) == after.result

    cluster.workers["b"].kill()
    marker = f"{after.run_id} rejoin"
    second_id, second_tag = f"{after.run_id}-rejoin", f"{after.run_id} rejoin 0"
    after.script.other_runs[marker] = [
        python(program(log, second_tag, 0.0, first_only=True)), terminate(f"{marker} finished"),
    ]
    started_at = time.time()
    handle = await start_run(cluster, second_id, f"partition test {marker}")
    try:
        result = await asyncio.wait_for(final_result(handle), SECOND_RUN_TIMEOUT_SECONDS)
    except TimeoutError:
        raise TimeoutError(f"the second run, with b gone, not done within {SECOND_RUN_TIMEOUT_SECONDS:.0f} s") from None
    r.second_finished = (result.state, result.stop_reason) == (AgentState.FINISHED, StopReason.TERMINATED)
    assert cluster.client is not None and cluster.fake is not None
    closed = (await read_history(cluster.client, second_id)).closed
    if closed is not None:
        r.heal_to_second_done, r.second_took = closed - heal_at, closed - started_at
    r.events_at_end = await _event_count(after.handle)

    first = [e for kind in ("start", "end") for e in program_events(log, kind) if e["tag"] == after.script.tag]
    on_a = [e for e in first if cluster.role_of_inode(e["netns"]) == "a"]
    r.a_call_ended = any(e["event"] == "end" for e in on_a)
    r.a_runs_after_heal = sum(1 for e in on_a if e["event"] == "start" and e["t"] >= heal_at)
    r.second_call_on = [
        cluster.role_of_inode(e["netns"]) for e in program_events(log, "start") if e["tag"] == second_tag
    ]
    r.second_thinks_on = [
        cluster.role_of_address(q.peer) for q in list(cluster.fake.requests) if marker in task_text(q.body)
    ]
    r.a_alive = a.returncode is None
