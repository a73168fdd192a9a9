"""Crash-injection benchmark: N agent runs (default 20) whose worker.py is
SIGKILLed at a seeded random point (during a think, during a tool, between
steps, inside a PlanningFlow child) and replaced by a fresh worker.

    python bench/crash_injection.py [--runs 20] [--seed S] [--concurrency 4]

It starts its own `temporal server start-dev` (SQLite file in a temporary
directory, free 127.0.0.1 ports, no Web UI) and drives the runs with
testkit/crash_driver.py, which also documents what is measured. Progress lines
go to stderr, the report to stdout. Exit code 0 when every run passed its
checks, 1 otherwise (the temporary directory with all logs is then kept).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO_DIR = Path(__file__).resolve().parent.parent
if str(REPO_DIR) not in sys.path:
    sys.path.insert(0, str(REPO_DIR))

from bench.common import DevServer, free_port  # noqa: E402
from testkit.crash_driver import KINDS, Summary, run_crash_injection  # noqa: E402


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20, help="number of runs (default 20)")
    parser.add_argument("--seed", type=int, default=None, help="seed of the kill points (default: random, printed)")
    parser.add_argument("--concurrency", type=int, default=4, help="runs at a time (default 4)")
    parser.add_argument(
        "--kinds", default=",".join(KINDS), help=f"kill points to deal out, comma-separated (default {','.join(KINDS)})"
    )
    parser.add_argument(
        "--tool-sandbox",
        choices=["none", "auto", "bwrap"],
        default="none",
        help="the workers' tool sandbox (default none; with auto/bwrap the execution logs live in the run directories)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory (logs, database)")
    return parser.parse_args(argv)


def progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


async def bench(args: argparse.Namespace, directory: Path) -> Summary:
    # No Web UI; the HTTP API and the metrics endpoint on free ports as well.
    server = DevServer(
        directory / "server", ["--headless", "--http-port", str(free_port()), "--metrics-port", str(free_port())]
    )
    began = time.monotonic()
    try:
        client = await server.start()
        progress(f"dev server at {server.address} ready in {time.monotonic() - began:.1f} s ({directory})")
        kinds = tuple(k.strip() for k in args.kinds.split(",") if k.strip())
        return await run_crash_injection(
            client, server.address, directory / "runs", args.runs, args.seed, args.concurrency, kinds, progress,
            tool_sandbox=args.tool_sandbox,
        )
    finally:
        server.stop()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1_000_000)
    progress(f"seed {args.seed} (replay with --seed {args.seed})")
    directory = Path(tempfile.mkdtemp(prefix="crash-bench-"))
    began = time.monotonic()
    summary = None
    try:
        summary = asyncio.run(bench(args, directory))
    finally:
        keep = args.keep or summary is None or not summary.ok
        if keep:
            progress(f"kept {directory}")
        else:
            shutil.rmtree(directory, ignore_errors=True)
    print(summary.report())
    print(f"wall time including the dev server: {time.monotonic() - began:.0f} s")
    return 0 if summary.ok else 1


if __name__ == "__main__":
    sys.exit(main())
