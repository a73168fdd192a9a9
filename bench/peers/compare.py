"""P13 peers side by side: python -m bench.peers.compare [--rounds R] [--steps 10,50] [--quick]
[--no-install] [--venvs DIR] [--write PATH]

durable-manus's editor step against the same agent on the OpenAI Agents SDK
and on pydantic-ai, each through its own official Temporal integration, and
against the bare Temporal loop (bench/bare.py): one dev server, one fake LLM
(bench/fake_llm.py, no latency), and rounds interleaved: in each round, for
each step count, a run of durable-manus, of the bare loop, of the Agents SDK
and of pydantic-ai (bench/peers/legs.py says what each run is). Reported:
wall and worker CPU per step (medians over the rounds), the ratios
durable-manus/peer and durable-manus/bare, and the history of a run of the
largest step count.

The peers run in their own venvs (.bench-venvs/, made by setup.py unless
--no-install); a peer whose venv is missing or whose program fails is left
out with a one-line note. Also P13 of `python -m bench.run`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from bench.bare import bare_worker
from bench.common import Samples, bench_settings, log, ms, verdict
from bench.context import Context, Environment, Section
from bench.peers.legs import BareLeg, DurableManusLeg, PeerLeg, PeerUnavailable, Sample
from bench.peers.setup import PEERS, VENVS_DIR, SetupFailed, ensure, is_ready, venv_python
from runtime.worker_factory import build_worker

FULL = (5, (10, 50))
QUICK = (2, (10, 20))
"""(rounds, step counts)."""
WARM_UP_STEPS = 3
SHORT_RUN_TARGET = 1.0
"""Issue 24: a 10-step run no slower per step than the best peer's..."""
LONG_RUN_PEER_TARGET = 0.5
"""...a 50-step run at most half the best peer's per step, wall and worker CPU..."""
LONG_RUN_BARE_TARGET = 1.3
"""...and at most 1.3x the bare Temporal loop's."""


@dataclass
class Report:
    rounds: int
    steps: tuple[int, ...]
    titles: dict[str, str] = field(default_factory=dict)
    """Leg name -> its title, in the order the legs ran."""
    samples: dict[tuple[str, int], list[Sample]] = field(default_factory=lambda: defaultdict(list))
    notes: dict[str, str] = field(default_factory=dict)
    """Leg name -> why it was not run (or stopped), one line."""
    load: list[str] = field(default_factory=list)
    """The load average when the rounds began and when they ended."""

    def per_step(self, leg: str, steps: int, what: str) -> Samples:
        return Samples([getattr(s, what) / s.steps for s in self.samples.get((leg, steps), [])])

    def has(self, leg: str, steps: int) -> bool:
        return bool(self.samples.get((leg, steps)))


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


async def start_peers(ctx: Context, venvs: Path, install: bool, notes: dict[str, str]) -> list[PeerLeg]:
    legs = []
    for peer in PEERS:
        if install:
            try:
                python = await asyncio.to_thread(ensure, peer, venvs, log)
            except SetupFailed as exc:
                notes[peer.name] = str(exc)
                continue
        elif is_ready(venvs, peer):
            python = venv_python(venvs, peer)
        else:
            notes[peer.name] = f"{peer.name}: not installed (`python -m bench.peers.setup` makes its venv in {venvs})"
            continue
        leg = PeerLeg(peer, python, ctx.scratch / f"{peer.name}.log")
        try:
            legs.append(await leg.start(ctx.server.address, ctx.fake.base_url))
        except PeerUnavailable as exc:
            notes[peer.name] = str(exc)
            await leg.stop()
    return legs


async def measure(
    ctx: Context, rounds: int, steps: tuple[int, ...], venvs: Path = VENVS_DIR, install: bool = True
) -> Report:
    report = Report(rounds, steps)
    settings = bench_settings(ctx.fake.base_url, ctx.workspace("peers"))
    bare_queue = f"bench-bare-{uuid.uuid4().hex[:8]}"
    peers = await start_peers(ctx, venvs, install, report.notes)
    try:
        async with build_worker(ctx.client, settings), bare_worker(ctx.client, bare_queue):
            legs: list = [DurableManusLeg(ctx.client, settings), BareLeg(ctx.client, bare_queue), *peers]
            report.titles = {leg.name: leg.title for leg in legs}
            log(f"P13 warm-up ({WARM_UP_STEPS} steps each): {', '.join(report.titles)}")
            for leg in list(legs):
                await run_leg(leg, WARM_UP_STEPS, legs, report, record=False)
            report.load.append(load_average())
            for round_number in range(1, rounds + 1):
                for count in steps:
                    for leg in list(legs):
                        await run_leg(leg, count, legs, report)
                log(f"P13 round {round_number}/{rounds}: " + "; ".join(
                    f"{leg.name} {ms(report.samples[(leg.name, steps[-1])][-1].wall / steps[-1])} ms/step"
                    for leg in legs if report.has(leg.name, steps[-1])
                ))
            report.load.append(load_average())
    finally:
        for peer in peers:
            await peer.stop()
    return report


async def run_leg(leg, steps: int, legs: list, report: Report, record: bool = True) -> None:
    """One run of one leg; a peer that fails is dropped with its note (the
    project's own legs failing stop the benchmark)."""
    try:
        sample = await leg.run(steps)
    except PeerUnavailable as exc:
        report.notes[leg.name] = str(exc)
        legs.remove(leg)
        await leg.stop()
        return
    if record:
        report.samples[(leg.name, steps)].append(sample)


def _ratio(report: Report, a: str, b: str, steps: int, what: str) -> float | None:
    if not (report.has(a, steps) and report.has(b, steps)):
        return None
    return report.per_step(a, steps, what).median / report.per_step(b, steps, what).median


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def best_peer_ratio(report: Report, steps: int, what: str) -> float | None:
    """durable-manus over the best (lowest) peer's per-step median."""
    peers = [p.name for p in PEERS if report.has(p.name, steps)]
    if not peers or not report.has("durable-manus", steps):
        return None
    best = min(report.per_step(p, steps, what).median for p in peers)
    return report.per_step("durable-manus", steps, what).median / best


def section(report: Report) -> Section:
    steps, short, long = report.steps, report.steps[0], report.steps[-1]
    head = " | ".join(f"{n} steps: wall ms/step | {n} steps: worker CPU ms/step" for n in steps)
    rows = []
    for name, title in report.titles.items():
        cells = []
        for n in steps:
            for what in ("wall", "cpu"):
                cells.append(report.per_step(name, n, what).spread(1000) if report.has(name, n) else "-")
        rows.append(f"| {title} | {' | '.join(cells)} |")
    others = [name for name in report.titles if name != "durable-manus"]
    ratio_rows = [
        f"| durable-manus / {report.titles[name]} | "
        + " | ".join(_fmt(_ratio(report, "durable-manus", name, n, w)) for n in steps for w in ("wall", "cpu"))
        + " |"
        for name in others
    ]
    history_rows = [
        f"| {title} | {statistics.median(s.events for s in report.samples[(name, long)]):.0f} | "
        f"{statistics.median(s.bytes for s in report.samples[(name, long)]) / 1024:.0f} |"
        for name, title in report.titles.items() if report.has(name, long)
    ]
    missing = [f"- {note}" for note in report.notes.values()]
    section = Section("P13 Peers side by side")
    section.markdown += [
        f"{report.rounds} rounds; each round runs, for each of {', '.join(map(str, steps))} steps, one run of each "
        "kind, one after another, on one dev server with one fake LLM (no latency). Each agent follows the same "
        "script: N turns that each call the editor once (`view` of a 5-line file: a Temporal activity for the "
        "peers; for durable-manus a local activity, since a call that only reads runs in the workflow task that "
        "got the reply, docs/tools.md), then a plain final answer (N + 1 model calls). The bare loop is 1 + 2N echo activities. Per step = the run's "
        "time / N; median (min-max) over the rounds. Worker CPU: user + system time of the process that runs "
        "the worker and the client (durable-manus and the bare loop share this benchmark's process; each peer "
        "has its own). Each peer uses its official Temporal integration with its defaults (workflow sandbox "
        "on, as durable-manus's): the OpenAI Agents SDK with OpenAIAgentsPlugin and its Chat Completions model "
        "(the fake speaks no Responses API), pydantic-ai with TemporalDurability and OpenAIChatModel. "
        f"Load average (1, 5, 15 min) when the rounds began: {report.load[0] if report.load else '?'}; "
        f"at the end: {report.load[-1] if report.load else '?'} (2 cores, shared with other work).",
        "",
        f"| run | {head} |",
        "|---|" + "---|" * (2 * len(steps)),
        *rows,
        "",
        "Ratios of the per-step medians (below 1: durable-manus costs less):",
        "",
        "| ratio | " + " | ".join(f"{n} steps: wall | {n} steps: CPU" for n in steps) + " |",
        "|---|" + "---|" * (2 * len(steps)),
        *ratio_rows,
        "",
        f"History of a {long}-step run (median; bytes: the protobuf size of its events):",
        "",
        "| run | events | KiB |",
        "|---|---|---|",
        *history_rows,
    ]
    if missing:
        section.markdown += ["", "Not measured:", "", *missing]
    short_wall = best_peer_ratio(report, short, "wall")
    long_wall, long_cpu = best_peer_ratio(report, long, "wall"), best_peer_ratio(report, long, "cpu")
    bare_wall, bare_cpu = (_ratio(report, "durable-manus", "bare", long, w) for w in ("wall", "cpu"))

    def judged(values: list[float | None], target: float) -> str:
        known = [v for v in values if v is not None]
        return "n/a" if len(known) < len(values) else verdict(max(known), target)

    section.summary += [
        (f"P13 ms/step at {long} steps, wall: " + " / ".join(report.titles),
         " / ".join(ms(report.per_step(n, long, "wall").median) if report.has(n, long) else "-"
                    for n in report.titles), "", ""),
        (f"P13 durable-manus / best peer per step, {short} steps, wall", _fmt(short_wall),
         f"<= {SHORT_RUN_TARGET}", judged([short_wall], SHORT_RUN_TARGET)),
        (f"P13 durable-manus / best peer per step, {long} steps, wall / CPU", f"{_fmt(long_wall)} / {_fmt(long_cpu)}",
         f"<= {LONG_RUN_PEER_TARGET}", judged([long_wall, long_cpu], LONG_RUN_PEER_TARGET)),
        (f"P13 durable-manus / bare per step, {long} steps, wall / CPU", f"{_fmt(bare_wall)} / {_fmt(bare_cpu)}",
         f"<= {LONG_RUN_BARE_TARGET}", judged([bare_wall, bare_cpu], LONG_RUN_BARE_TARGET)),
    ]
    return section


async def run(ctx: Context) -> Section:
    """P13 in `python -m bench.run`."""
    rounds, steps = QUICK if ctx.quick else FULL
    return section(await measure(ctx, rounds, steps))


def parse_steps(text: str) -> tuple[int, ...]:
    try:
        counts = tuple(sorted({int(part) for part in text.split(",") if part.strip()}))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--steps takes step counts separated by commas, not {text!r}") from None
    if not counts or counts[0] < 1:
        raise argparse.ArgumentTypeError(f"--steps takes positive step counts, not {text!r}")
    return counts


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="durable-manus against its peers on Temporal, side by side")
    parser.add_argument("--quick", action="store_true", help=f"{QUICK[0]} rounds of {QUICK[1]} steps")
    parser.add_argument("--rounds", type=int, default=None, help=f"rounds (default {FULL[0]})")
    parser.add_argument("--steps", type=parse_steps, default=None,
                        help=f"step counts, e.g. 10,50 (default {','.join(map(str, FULL[1]))})")
    parser.add_argument("--venvs", type=Path, default=VENVS_DIR, help="where the peers' venvs live")
    parser.add_argument("--no-install", action="store_true", help="use only the venvs that are ready; install nothing")
    parser.add_argument("--write", metavar="PATH", help="write the section's markdown here")
    parser.add_argument("--deadline", type=float, default=1800.0, help="stop everything after this many seconds")
    parser.add_argument("--keep", action="store_true", help="keep the scratch dir (server log, peers' stderr)")
    args = parser.parse_args(argv)
    if args.rounds is not None and args.rounds < 1:
        parser.error("--rounds must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    from bench.run import console_table

    args = parse_args(sys.argv[1:] if argv is None else argv)
    rounds, steps = QUICK if args.quick else FULL
    rounds, steps = args.rounds or rounds, args.steps or steps

    async def measured() -> Report:
        async with Environment(args.quick, keep=args.keep) as ctx:
            return await measure(ctx, rounds, steps, args.venvs, install=not args.no_install)

    try:
        report = asyncio.run(asyncio.wait_for(measured(), timeout=args.deadline))
    except asyncio.TimeoutError:
        print(f"P13 stopped: over the {args.deadline:.0f} s deadline", file=sys.stderr)
        return 1
    result = section(report)
    print("\n".join(result.markdown))
    print()
    print(console_table([result]))
    if args.write:
        Path(args.write).write_text("\n".join([f"## {result.title}", "", *result.markdown, ""]), encoding="utf-8")
        print(f"wrote {args.write}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
