"""P14 parallel tool calls: a reply of four web_fetch calls, run at once or
one by one.

One run per kind and round, each one step of FETCHES web_fetch calls against a
local page that answers after PAGE_DELAY seconds, then terminate (a scripted
in-process fake LLM: bench/fake_llm.py has no multi-call replies):

  concurrent  the run's input as the starter writes it now (web_fetch marked
              concurrent: the four run at once);
  sequential  the same input without the mark, as a run started before it
              (the four run one by one).

Rounds are interleaved; medians. The step's tool phase is read from the
run's history: first fetch scheduled to last fetch completed.
"""

from __future__ import annotations

import json
import time

from agent_model.profiles import AgentProfile
from agent_model.run import AgentRunInput
from bench.common import Samples, bench_profile, log, new_run_id
from bench.context import Context, Section
from config.settings import WebSettings
from runtime.worker_factory import build_worker
from testkit.fake_openai import FakeOpenAI, Reply, call, terminate
from testkit.fake_web import Answer, FakeWeb
from testkit.run_results import final_result
from testkit.settings import make_settings
from tools import with_tool_terms
from workflows.agent import AgentWorkflow

FETCHES = 4
PAGE_DELAY = 0.2
ROUNDS, QUICK_ROUNDS = 5, 2
KINDS = ("concurrent", "sequential")


def slow_page(seen) -> Answer:
    time.sleep(PAGE_DELAY)  # the server's own thread: a slow site
    return Answer(body=f"<html><body><p>{seen.path}</p></body></html>")


def unmarked(profile: AgentProfile) -> AgentProfile:
    data = json.loads(profile.model_dump_json())
    for terms in data["tool_terms"].values():
        terms.pop("concurrent", None)
    return AgentProfile.model_validate(data)


def tool_phase_seconds(history) -> float:
    scheduled, completed = [], []
    names: dict[int, str] = {}
    for event in history.events:
        if event.HasField("activity_task_scheduled_event_attributes"):
            names[event.event_id] = event.activity_task_scheduled_event_attributes.activity_type.name
            if names[event.event_id] == "web_fetch":
                scheduled.append(event.event_time.ToDatetime())
        elif event.HasField("activity_task_completed_event_attributes"):
            if names.get(event.activity_task_completed_event_attributes.scheduled_event_id) == "web_fetch":
                completed.append(event.event_time.ToDatetime())
    return (max(completed) - min(scheduled)).total_seconds()


async def one_run(ctx: Context, settings, fake: FakeOpenAI, urls: list[str], profile: AgentProfile) -> dict[str, float]:
    fake.turns = [Reply(tool_calls=[call("web_fetch", {"url": url}) for url in urls]), terminate("read")]
    began = time.perf_counter()
    handle = await ctx.client.start_workflow(
        AgentWorkflow.run, AgentRunInput(task="Read the pages.", profile=profile), id=new_run_id("bench-p13"),
        task_queue=settings.task_queue,
    )
    result = await final_result(handle)
    wall = time.perf_counter() - began
    calls = result.steps[0].tool_calls if result.steps else []
    if result.steps_taken != 2 or len(calls) != FETCHES or any(c.error for c in calls):
        raise RuntimeError(
            f"P14: the run went wrong ({result.state.value}/{result.stop_reason.value}, {result.note!r}): "
            f"{[c.observation[:200] for c in calls]}"
        )
    return {"run": wall, "tools": tool_phase_seconds(await handle.fetch_history())}


async def run(ctx: Context) -> Section:
    section = Section("P14")
    rounds = QUICK_ROUNDS if ctx.quick else ROUNDS
    web = FakeWeb().start()
    samples = {kind: {"run": Samples(), "tools": Samples()} for kind in KINDS}
    try:
        urls = [web.route(f"/page{n}", slow_page) for n in range(FETCHES)]
        marked = with_tool_terms(bench_profile(3, ["web_fetch"]))
        profiles = {"concurrent": marked, "sequential": unmarked(marked)}
        with FakeOpenAI() as fake:
            settings = make_settings(fake.base_url, ctx.workspace("p13")).model_copy(
                update={"web": WebSettings(allow=(web.origin,))}
            )
            async with build_worker(ctx.client, settings):
                for kind in KINDS:  # warm-up
                    await one_run(ctx, settings, fake, urls, profiles[kind])
                for i in range(rounds):
                    for kind in KINDS:
                        for measure, value in (await one_run(ctx, settings, fake, urls, profiles[kind])).items():
                            samples[kind][measure].add(value)
                    log(f"P14 round {i + 1}/{rounds}: " + ", ".join(
                        f"{kind} {samples[kind]['tools'].values[-1] * 1000:.0f} ms" for kind in KINDS
                    ))
    finally:
        web.stop()

    def ms(kind: str, measure: str) -> float:
        return samples[kind][measure].median * 1000

    tools_ratio = ms("sequential", "tools") / ms("concurrent", "tools")
    run_ratio = ms("sequential", "run") / ms("concurrent", "run")
    section.markdown += [
        "## P14 parallel tool calls",
        "",
        f"{rounds} interleaved rounds of two runs: one reply of {FETCHES} web_fetch calls to a local page that "
        f"answers after {PAGE_DELAY * 1000:.0f} ms, then terminate (fake LLM without latency, worker in this "
        "process). `concurrent`: the input as the starter writes it (web_fetch marked, the calls run at once); "
        "`sequential`: the same input without the mark, as a run started before it. Medians.",
        "",
        "| kind | tool phase ms (first fetch scheduled to last completed) | whole run ms |",
        "|---|---|---|",
        *(f"| {kind} | {ms(kind, 'tools'):.0f} | {ms(kind, 'run'):.0f} |" for kind in KINDS),
        "",
        f"Sequential / concurrent: tool phase {tools_ratio:.2f}x, whole run {run_ratio:.2f}x "
        f"(the ideal tool phase ratio is {FETCHES}x).",
    ]
    section.summary += [
        (f"P14 {FETCHES} web_fetch of one reply, sequential / concurrent (tool phase)", f"{tools_ratio:.2f}", "report", ""),
    ]
    return section
