"""Run the benchmarks: python -m bench.run (or python bench/run.py) [--quick] [--only P1,P3] [--write PATH | --no-write]

Starts its own dev server (SQLite file, as the embedded one) on free ports and
the lean fake LLM (bench/fake_llm.py) in a scratch dir, runs P1, P3, P2, P4, P5, P6, P7, P8, P9, P10, P11,
P12, P13, P14, P15, P16 (in this order, so that P3's peak RSS is not inflated by P2's big histories; P13, the peers side
by side, makes the peers' venvs first where they are missing: bench/peers/setup.py),
prints a table, and writes the results as markdown (full mode: BENCHMARKS.md;
quick mode: nothing unless --write is given). Everything stops by itself:
the whole run is bounded by --deadline seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import logging
import os
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as `python bench/run.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import REPO_DIR, log, machine_info  # noqa: E402
from bench.context import Environment, Section  # noqa: E402

ORDER = ("P1", "P3", "P2", "P4", "P5", "P6", "P7", "P8", "P9", "P10", "P11", "P12", "P13", "P14", "P15", "P16")
MODULES = {
    "P1": "p1_step_overhead", "P2": "p2_history", "P3": "p3_scale", "P4": "p4_resume", "P5": "p5_long_run",
    "P6": "p6_browser_step", "P7": "p7_mcp_flood",
    "P8": "p8_approval_gate", "P9": "p9_snapshots", "P10": "p10_session_turn", "P11": "tracing_cost",
    "P12": "live_stream", "P13": "peers.compare", "P14": "p14_parallel_calls",
    "P15": "p15_sandboxed_call",
    "P16": "p16_cold_replay",
}


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="durable-manus benchmarks")
    parser.add_argument("--quick", action="store_true", help="smaller sizes (about 3 minutes)")
    parser.add_argument("--only", default="", help="comma-separated subset of P1,P2,P3,P4,P5,P6,P7,P8,P9,P10,P11,P12,P13,P14,P15,P16")
    out = parser.add_mutually_exclusive_group()
    out.add_argument("--write", metavar="PATH", help="write the markdown report here")
    out.add_argument("--no-write", action="store_true", help="do not write a report (full mode writes BENCHMARKS.md)")
    parser.add_argument("--deadline", type=float, default=None,
                        help="stop everything after this many seconds (default 600 quick, 1800 full)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch dir (server log, database)")
    return parser.parse_args(argv)


async def run_all(args: argparse.Namespace, selected: list[str]) -> list[Section]:
    # Only the selected benchmarks are imported: one being edited cannot stop the others.
    modules = {name: importlib.import_module(f"bench.{MODULES[name]}") for name in selected}
    sections = []
    async with Environment(args.quick, keep=args.keep) as ctx:
        for name in selected:
            began = time.monotonic()
            log(f"{name} starts")
            section = await modules[name].run(ctx)
            section.markdown.append("")
            section.markdown.append(f"_{name} took {time.monotonic() - began:.0f} s._")
            sections.append(section)
            log(f"{name} done in {time.monotonic() - began:.0f} s")
    return sections


def console_table(sections: list[Section]) -> str:
    rows = [("benchmark", "measured", "target", "")] + [row for s in sections for row in s.summary]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = []
    for i, row in enumerate(rows):
        lines.append("  ".join(cell.ljust(widths[j]) for j, cell in enumerate(row)).rstrip())
        if i == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def report(sections: list[Section], info: dict[str, str], command: str, took: float, quick: bool) -> str:
    lines = [
        "# Benchmarks",
        "",
        f"Measured {time.strftime('%Y-%m-%d %H:%M %Z')} with `{command}` "
        f"({'quick' if quick else 'full'} mode, {took / 60:.1f} minutes). "
        "Ratios are from this one run; see docs/testing.md, \"Benchmarks\", for what each benchmark does.",
        "",
        "| machine | |",
        "|---|---|",
        *[f"| {k} | {v} |" for k, v in info.items()],
        "",
        "## Summary",
        "",
        "| benchmark | measured | target | |",
        "|---|---|---|---|",
        *[f"| {a} | {b} | {c} | {d} |" for s in sections for a, b, c, d in s.summary],
        "",
    ]
    for section in sections:
        lines += [f"## {section.title}", "", *section.markdown, ""]
    analysis = Path(__file__).with_name("analysis.md")
    if analysis.exists():
        lines += [analysis.read_text(encoding="utf-8").rstrip(), ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    wanted = {n.strip().upper() for n in args.only.split(",") if n.strip()} or set(ORDER)
    unknown = wanted - set(ORDER)
    if unknown:
        print(f"unknown benchmark(s): {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    selected = [n for n in ORDER if n in wanted]
    deadline = args.deadline or (600.0 if args.quick else 1800.0)
    command = "python -m bench.run" + (" " + " ".join(sys.argv[1:]) if sys.argv[1:] else "")
    info = machine_info()
    began = time.monotonic()
    try:
        sections = asyncio.run(asyncio.wait_for(run_all(args, selected), timeout=deadline))
    except asyncio.TimeoutError:
        print(f"benchmarks stopped: over the {deadline:.0f} s deadline", file=sys.stderr)
        return 1
    took = time.monotonic() - began
    print()
    print(console_table(sections))
    print(f"\n({'quick' if args.quick else 'full'} mode, {took:.0f} s)")
    target = args.write or (None if (args.no_write or args.quick) else str(REPO_DIR / "BENCHMARKS.md"))
    if target:
        Path(target).write_text(report(sections, info, command, took, args.quick), encoding="utf-8")
        print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    os.chdir(REPO_DIR)
    sys.exit(main())
