"""P12 live streaming: what streaming a think costs per step, and how soon a
token reaches a follower.

Two worker.py processes on the benchmark's dev server share one workspace
root: one streams its thinks (`[live] stream = true`, the default), the other
makes plain calls (DURABLE_MANUS_LIVE_STREAM=0). Runs of STEPS steps
alternate between them (on, off, on, off, ...). The model is
testkit/fake_openai.py in this process: each think is a THOUGHT_CHARS
thought and one editor call, streamed in CHUNK_CHARS pieces CHUNK_DELAY
apart; the plain answer waits as long before it is sent, so both take the
same model time. Per run: wall seconds per step, and the worker process's
CPU seconds per step (/proc). For the streaming runs this process follows
the journal (runtime/live_feed.py follow_think) and, like a browser, the
run page's event stream (runtime/run_page/, served in this process): a
piece's latency is from its send time at the fake
(RecordedRequest.chunks_sent) to the moment follow_think yields the event
that completes it, and to the moment that event's `token` arrives over the
page's Server-Sent Events.
"""

from __future__ import annotations

import asyncio
import json
import math
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

from agent_model.live_events import LiveEvent, journal_dir_name
from config.settings import Settings
from bench.common import Samples, bench_profile, bench_settings, check_result, cpu_seconds, log, start_agent
from bench.context import Context, Section
from bench.p2_history import pollers_of, until
from runtime.live_feed import follow_think
from testkit.e2e import Child, child_env, start_worker, unique_queue
from testkit.fake_openai import FakeOpenAI, Reply, call, turn_of
from testkit.run_page import Page, run_path, serving_page
from testkit.run_results import final_result

THOUGHT_CHARS = 480
CHUNK_CHARS = 4
CHUNK_DELAY = 0.004
"""120 pieces 4 ms apart: ~0.5 s of streaming per think, ~250 tokens/s."""
KEY = "sk-bench-live-0123456789abcdef"
"""The workers' API key: the journal holds back what may begin it."""
EDIT = {"command": "view", "path": "."}


def thought(step: int) -> str:
    words = f"Step {step}: I look at the directory listing again and weigh what to do next. "
    return (words * (THOUGHT_CHARS // len(words) + 1))[:THOUGHT_CHARS]


def pieces(text: str) -> int:
    return math.ceil(len(text) / CHUNK_CHARS)


def answer(body: dict, attempt: int) -> Reply:
    step = turn_of(body) + 1
    content = thought(step)
    arguments = json.dumps(EDIT)
    sent = pieces(content) + 1 + pieces(arguments)  # the call's name is one piece
    # The plain answer waits as long as the stream takes to send.
    delay = 0.0 if body.get("stream") else sent * CHUNK_DELAY
    return Reply(content=content, tool_calls=[call("str_replace_editor", EDIT)], delay=delay)


@dataclass
class Follower:
    """Events of one run's journal, each with the time follow_think yielded it."""

    events: list[tuple[LiveEvent, float]] = field(default_factory=list)

    async def follow(self, root: Path, run_id: str) -> None:
        async for event in follow_think(root, journal_dir_name(run_id)):
            self.events.append((event, time.time()))

    async def follow_page(self, page: Page, run_id: str) -> None:
        """The run page's `token` events, read off its event stream as a browser would."""
        reader, writer = await asyncio.open_connection("127.0.0.1", page.port)
        head = {"Host": f"127.0.0.1:{page.port}", "Cookie": page.cookie, "Accept": "text/event-stream"}
        path = run_path(run_id, "events")
        writer.write((f"GET {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in head.items()) + "\r\n").encode())
        try:
            await reader.readuntil(b"\r\n\r\n")
            while True:
                block = (await reader.readuntil(b"\n\n")).decode()
                read = time.time()
                lines = block.split("\n")
                if "event: token" not in lines:
                    continue
                data = json.loads("".join(line[6:] for line in lines if line.startswith("data: ")))
                self.events.append((LiveEvent(run_id, data["step"], data["kind"], data["text"], data["channel"]), read))
        finally:
            writer.close()

    def content_by_step(self) -> dict[int, list[tuple[int, float]]]:
        """Per step, each content event as (characters of content so far, read time)."""
        out: dict[int, list[tuple[int, float]]] = {}
        ends: dict[int, int] = {}
        for event, read in self.events:
            if event.step is None:
                continue
            if event.kind == "think_started":
                out[event.step], ends[event.step] = [], 0
            elif event.kind == "token" and event.channel == "content" and event.step in out:
                ends[event.step] += len(event.text)
                out[event.step].append((ends[event.step], read))
        return out


def latencies(fake: FakeOpenAI, run_id: str, follower: Follower) -> list[float]:
    """Send -> read, in seconds, of every content piece of the run's thinks."""
    read = follower.content_by_step()
    found = []
    for request in fake.requests:
        if not request.streamed or run_id not in json.dumps(request.body.get("messages")):
            continue
        events = read.get(request.turn + 1, [])
        end = 0
        for sent, text in request.chunks_sent[: pieces(thought(request.turn + 1))]:  # the content's pieces
            end += len(text)
            seen = next((at for upto, at in events if upto >= end), None)
            if seen is not None:
                found.append(seen - sent)
    return found


async def one_run(ctx: Context, settings, worker: Child, steps: int, fake: FakeOpenAI, page: Page | None):
    """Per step wall and CPU, and the token latencies to the follower and to the page (with a page)."""
    follower, on_page = Follower(), Follower()
    handle = await start_agent(ctx.client, settings, bench_profile(steps, ["str_replace_editor"]), {})
    tasks = [] if page is None else [
        asyncio.ensure_future(follower.follow(settings.workspace_root, handle.id)),
        asyncio.ensure_future(on_page.follow_page(page, handle.id)),
    ]
    cpu, began = cpu_seconds(worker.pid), time.perf_counter()
    try:
        result = await asyncio.wait_for(final_result(handle), 300)
    finally:
        wall, used = time.perf_counter() - began, cpu_seconds(worker.pid) - cpu
        if tasks:
            await asyncio.sleep(0.2)  # the last think's end reaches the followers
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    # Every step thinks; at its step limit the run ends without terminate.
    check_result(result, steps, "P12 run")
    if page is None:
        return wall / steps, used / steps, [], []
    return wall / steps, used / steps, latencies(fake, handle.id, follower), latencies(fake, handle.id, on_page)


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


async def run(ctx: Context) -> Section:
    pairs, steps = (3, 5) if ctx.quick else (8, 10)
    scratch = ctx.scratch / "p11"
    root = ctx.workspace("p11")
    fake = FakeOpenAI(responder=answer, api_key=KEY, chunk_chars=CHUNK_CHARS, chunk_delay=CHUNK_DELAY).start()
    workers: dict[str, tuple[Child, Settings]] = {}
    try:
        for mode, stream in (("on", "1"), ("off", "0")):
            queue = unique_queue(f"p11-{mode}")
            env = child_env(
                scratch, address=ctx.server.address, task_queue=queue, base_url=fake.base_url, workspace_root=root,
                extra={"OPENAI_API_KEY": KEY, "DURABLE_MANUS_LIVE_STREAM": stream, "DURABLE_MANUS_WORKER_IDLE_EXIT": "0"},
            )
            child = start_worker(env, scratch / "logs", f"worker-{mode}")
            settings = bench_settings(fake.base_url, root, queue)

            async def polling(queue=queue, child=child):
                return child.pid in await pollers_of(ctx.client, queue)

            await until(polling, 120, f"poll of the {mode} worker", interval=0.1)
            workers[mode] = (child, settings)
        wall = {"on": Samples(), "off": Samples()}
        cpu = {"on": Samples(), "off": Samples()}
        token_latency: list[float] = []
        page_latency: list[float] = []
        async with serving_page(ctx.client, workers["on"][1]) as page:
            for rep in range(pairs + 1):  # the first pair warms up
                for mode in ("on", "off"):
                    child, settings = workers[mode]
                    per_step, cpu_per_step, found, shown = await one_run(
                        ctx, settings, child, steps, fake, page if mode == "on" else None
                    )
                    if rep:
                        wall[mode].add(per_step)
                        cpu[mode].add(cpu_per_step)
                        token_latency += found
                        page_latency += shown
                    log(f"P12 pair {rep}/{pairs} streaming {mode}: {per_step * 1000:.0f} ms/step, "
                        f"worker CPU {cpu_per_step * 1000:.1f} ms/step" + (f", {len(found)} pieces timed" if found else ""))
    finally:
        for child, _ in workers.values():
            await child.stop()
        fake.stop()
    wall_ratio = wall["on"].median / wall["off"].median
    cpu_ratio = cpu["on"].median / cpu["off"].median
    median, p95 = statistics.median(token_latency), percentile(token_latency, 0.95)
    page_median, page_p95 = statistics.median(page_latency), percentile(page_latency, 0.95)
    section = Section("P12 live streaming")
    section.markdown += [
        f"{pairs} pairs of {steps}-step runs, interleaved (streaming on, off, on, ...); median (min-max) per step. "
        f"Each think streams a {THOUGHT_CHARS}-character thought and one editor call in {CHUNK_CHARS}-character "
        f"pieces {CHUNK_DELAY * 1000:.0f} ms apart (the plain answer waits as long); two worker.py processes, one "
        "streaming, one not, and this process following the streaming runs' journals.",
        "",
        "| streaming | wall ms/step | worker CPU ms/step |",
        "|---|---|---|",
        f"| on (`[live] stream = true`, the default) | {wall['on'].spread(1000)} | {cpu['on'].spread(1000)} |",
        f"| off | {wall['off'].spread(1000)} | {cpu['off'].spread(1000)} |",
        f"| on/off | **{wall_ratio:.2f}** | **{cpu_ratio:.2f}** |",
        "",
        f"Token latency, a piece leaving the fake LLM -> follow_think yields it: median **{median * 1000:.0f} ms**, "
        f"p95 **{p95 * 1000:.0f} ms** ({len(token_latency)} pieces). It holds the worker's batching (at most 20 "
        "writes a second), the follower's polling (every 20 ms) and the pieces held back while they may begin "
        "the worker's key. (CPU: the process clock ticks 10 ms; per step it is the run's total over its steps.)",
        "",
        f"Token latency, a piece leaving the fake LLM -> its `token` event read off the run page's event stream "
        f"(`starter.py ui`, in this process): median **{page_median * 1000:.0f} ms**, p95 **{page_p95 * 1000:.0f} ms** "
        f"({len(page_latency)} pieces); the page follows the same journal and adds its queue and the socket.",
    ]
    section.summary += [
        ("P12 streaming on/off per step, wall", f"{wall_ratio:.2f}", "-", "measured"),
        ("P12 streaming on/off per step, worker CPU", f"{cpu_ratio:.2f}", "-", "measured"),
        ("P12 token latency fake -> follower (median, p95)", f"{median * 1000:.0f} ms, {p95 * 1000:.0f} ms", "-", "measured"),
        ("P12 token latency fake -> run page (median, p95)", f"{page_median * 1000:.0f} ms, {page_p95 * 1000:.0f} ms", "-", "measured"),
    ]
    return section
