"""Run one durable-manus worker: every workflow and activity, until SIGINT/SIGTERM.

    python worker.py [--config PATH]

Configuration is checked before connecting (exit 2 with one line on a problem).
The Temporal server is found through TEMPORAL_ADDRESS / TEMPORAL_NAMESPACE /
TEMPORAL_API_KEY / TLS settings (temporalio.envconfig), default 127.0.0.1:7233.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys

from activities.tools.sandbox import SandboxUnavailable
from config.settings import ConfigError, load_settings
from runtime.cli import exit_now
from runtime.connection import TemporalUnreachable, connect
from runtime.worker_factory import build_worker, check_worker_settings, harden_worker_process


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Run a durable-manus worker.")
    parser.add_argument("--config", help="config file (default: config/config.toml or $DURABLE_MANUS_CONFIG)")
    parser.add_argument(
        "--connect-timeout", type=float, default=60.0, help="seconds to wait for the Temporal server (default 60)"
    )
    return parser.parse_args(argv)


async def run_worker(args: argparse.Namespace) -> int:
    settings = load_settings(args.config)
    settings.require_workspace_root()
    sandbox = check_worker_settings(settings)
    harden_worker_process()
    client = await connect(wait_seconds=args.connect_timeout)
    worker = build_worker(client, settings, sandbox)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    logging.info("worker polling task queue %s (workspace %s)", settings.task_queue, settings.workspace_root)
    async with worker:
        await stop.wait()
        logging.info("shutting down")
    return 0


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        return asyncio.run(run_worker(args))
    except (ConfigError, TemporalUnreachable, SandboxUnavailable) as e:
        print(f"worker: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    exit_now(main())
