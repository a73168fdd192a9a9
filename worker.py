"""Run one durable-manus worker: every workflow and activity, until SIGINT/SIGTERM.

    python worker.py [--config PATH]          # or: python starter.py worker [--config PATH]
    python worker.py --idle-exit SECONDS      # exit once no run is open on the task queue that long

Configuration is checked before connecting (exit 2 with one line on a problem).
The Temporal server is found through TEMPORAL_ADDRESS / TEMPORAL_NAMESPACE /
TEMPORAL_API_KEY / TLS settings (temporalio.envconfig), default 127.0.0.1:7233.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from typing import TextIO

from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig

from activities.context_store import ContextStore
from activities.tools.sandbox import SandboxUnavailable
from config.settings import ConfigError, load_settings
from runtime.cli import exit_now, pipe_safe
from runtime.config_report import ConfigWatch, config_lines, watch_config
from runtime.connection import connect, data_converter
from runtime.idle_exit import wait_until_idle
from runtime.terminal_text import InertFormatter
from runtime.worker_factory import build_worker, check_worker_settings, harden_worker_process
from runtime.user_errors import TemporalUnreachable
from runtime.worker_options import METRICS_VARIABLE, parse_worker_args


async def run_worker(args: argparse.Namespace) -> int:
    runtime = metrics_runtime(args.metrics) if args.metrics else None
    if args.metrics:  # the web rules refuse it (runtime/control_plane.py)
        os.environ[METRICS_VARIABLE] = args.metrics
    settings = load_settings(args.config)
    watch = ConfigWatch.of(settings)  # as read now, so that an edit during the start is seen too
    for line in config_lines(settings):
        logging.info("%s", line)
    for note in settings.notes:
        logging.info("config: %s", note)
    settings.require_workspace_root()
    sandbox = check_worker_settings(settings)
    harden_worker_process()
    client = await connect(data_converter(settings.encryption), wait_seconds=args.connect_timeout, runtime=runtime)
    worker = build_worker(client, settings, sandbox)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    logging.info("worker polling task queue %s (workspace %s)", settings.task_queue, settings.workspace_root)
    async with worker:
        pruning = asyncio.create_task(asyncio.to_thread(ContextStore(settings.workspace_root).prune))
        watching = asyncio.create_task(watch_config(watch))
        idle = None
        if args.idle_exit is not None:
            idle = asyncio.create_task(wait_until_idle(client, settings.task_queue, args.idle_exit))
            idle.add_done_callback(lambda _: stop.set())
        await stop.wait()
        pruning.cancel()
        watching.cancel()
        if idle is not None:
            idle.cancel()
        logging.info("shutting down")
    return 0



def metrics_runtime(address: str) -> Runtime:
    """A Temporal runtime that serves the SDK's metrics and the activities' own
    (think latency, tokens, context hits, tool durations) for Prometheus."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(f"--metrics must be HOST:PORT, not {address!r}")
    try:
        runtime = Runtime(telemetry=TelemetryConfig(metrics=PrometheusConfig(bind_address=address)))
    except Exception as e:  # the core reports a busy or invalid address this way
        raise ConfigError(f"cannot serve metrics on {address}: {str(e).splitlines()[0]}") from None
    logging.info("Prometheus metrics on http://%s/metrics", address)
    return runtime


LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def log_handler(stream: TextIO) -> logging.Handler:
    """The worker's log on `stream`, inert: its lines quote what MCP servers,
    models and pages sent (runtime/terminal_text.py)."""
    handler = logging.StreamHandler(stream)
    handler.setFormatter(InertFormatter(LOG_FORMAT))
    return handler


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, handlers=[log_handler(sys.stderr)])
    args = parse_worker_args(sys.argv[1:] if argv is None else argv)
    try:
        return asyncio.run(run_worker(args))
    except (ConfigError, TemporalUnreachable, SandboxUnavailable) as e:
        print(f"worker: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    exit_now(pipe_safe(main))
