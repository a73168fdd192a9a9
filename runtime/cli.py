"""Process exit and Temporal's log output for the command-line entry points."""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import signal
import sys
from typing import TYPE_CHECKING, Callable

from runtime.terminal_text import inert

if TYPE_CHECKING:
    from temporalio.runtime import Runtime


EXIT_BROKEN_PIPE = 128 + signal.SIGPIPE
"""141: what a shell reports for a process that a closed pipe ended."""


def exit_now(code: int) -> None:
    """Exit without interpreter finalization: after a failed connect, the Temporal
    core's native threads can abort a normal shutdown (PyGILState_Release)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BrokenPipeError:
            code = code or EXIT_BROKEN_PIPE
    os._exit(code)


def pipe_safe(main: Callable[[], int]) -> int:
    """main()'s exit code, and when the reader of stdout went away (`starter.py
    list | head -1`) the end a process killed by SIGPIPE would have: no more
    output, no traceback, exit 141. (Python ignores SIGPIPE, so a write to a
    closed pipe raises instead; the signal's default action is not restored,
    for it would also end the process on a closed socket.)"""
    try:
        code = main()
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        with contextlib.suppress(OSError, ValueError):  # ValueError: a stdout without a file descriptor
            # What is left in stdout's buffer goes nowhere rather than fail again at exit.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE


class _OneLine(logging.Formatter):
    """A record as one line: a traceback is cut to its exception's first line."""

    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix

    def format(self, record: logging.LogRecord) -> str:
        text = record.getMessage()
        error = record.exc_info[1] if record.exc_info else None
        if error is not None:
            detail = str(error).strip().splitlines()
            text += f": {type(error).__name__}" + (f": {detail[0]}" if detail else "")
        return f"{self.prefix}{' '.join(inert(text).split())}"


class _Gate(logging.Filter):
    def __init__(self) -> None:
        super().__init__()
        self.open = True

    def filter(self, record: logging.LogRecord) -> bool:
        return self.open


_gate = _Gate()


def mute_temporal_logs(muted: bool) -> None:
    """Hold back the SDK's log lines (its worker's too) while the CLI has already
    said what is wrong, e.g. that the server is gone: they would only repeat it."""
    _gate.open = not muted


@functools.cache
def cli_runtime(prefix: str = "starter: ") -> Runtime:
    """A Temporal runtime whose core logs only errors, through Python logging.

    The core's default writes a multi-line coloured WARN to stdout for every
    retried call, two dozen of them when the server goes away. The CLI checks
    the server itself and says so in one line, so only the core's errors are
    kept, and they and the SDK's own records come out as one line each on
    stderr.
    """
    from temporalio.runtime import LogForwardingConfig, LoggingConfig, Runtime, TelemetryConfig, TelemetryFilter

    logger = logging.getLogger("temporalio")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_OneLine(prefix))
    handler.addFilter(_gate)
    logger.addHandler(handler)
    logger.setLevel(logging.WARNING)
    logger.propagate = False
    # Other loggers (an activity of the CLI's own worker, an MCP link) would
    # fall to logging's last resort, which prints tracebacks and raw text
    # that may quote a model, a page or a server.
    root = logging.getLogger()
    if not root.handlers:
        fallback = logging.StreamHandler(sys.stderr)
        fallback.setFormatter(_OneLine(""))  # as the last resort wrote them, but one inert line
        fallback.addFilter(_gate)
        fallback.setLevel(logging.WARNING)
        root.addHandler(fallback)
    # Temporal retries a failed activity attempt, and the run's step lines show
    # what came of it; a line per attempt would only break them up.
    logging.getLogger("temporalio.activity").setLevel(logging.ERROR)
    forwarding = LogForwardingConfig(logger=logging.getLogger("temporalio.core"), append_target_to_name=False)
    return Runtime(
        telemetry=TelemetryConfig(
            logging=LoggingConfig(filter=TelemetryFilter(core_level="ERROR", other_level="ERROR"), forwarding=forwarding)
        )
    )

