"""The worker's command-line options, shared by worker.py and `starter.py worker`.

Kept apart from worker.py so that the starter can parse (and print help for)
the `worker` command without importing the worker stack."""

from __future__ import annotations

import argparse
import os

METRICS_VARIABLE = "DURABLE_MANUS_METRICS"
"""HOST:PORT of the worker's metrics (worker.py --metrics sets it too)."""


def add_worker_arguments(parser: argparse.ArgumentParser) -> None:
    """The worker's options; `python starter.py worker` takes the same."""
    parser.add_argument("--config", help="config file (default: config/config.toml or $DURABLE_MANUS_CONFIG)")
    parser.add_argument(
        "--connect-timeout", type=float, default=60.0, help="seconds to wait for the Temporal server (default 60)"
    )
    parser.add_argument(
        "--idle-exit",
        metavar="SECONDS",
        type=float,
        default=None,
        help="exit once no run has been open on the task queue for SECONDS (the worker a starter starts "
        "for its runs); by default the worker runs until SIGINT/SIGTERM",
    )
    parser.add_argument(
        "--metrics",
        metavar="HOST:PORT",
        default=os.environ.get(METRICS_VARIABLE) or None,
        help=f"serve Prometheus metrics on http://HOST:PORT/metrics (or ${METRICS_VARIABLE}); off by default",
    )


def parse_worker_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="worker.py", description="Run a durable-manus worker.")
    add_worker_arguments(parser)
    return parser.parse_args(argv)
