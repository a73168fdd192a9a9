"""The entry scripts' main(argv) called in the test's own process, with the
environment run_cli gives a child: a CLI test without the cost of a new
interpreter. The subprocess smoke tests (tests/test_cli_smoke.py) cover what
only a real process shows: the exit code through os._exit, the script's own
imports."""

from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import dataclass
from typing import Mapping

import pytest

from runtime import cli as cli_module

CLEAN_PREFIXES = ("OPENAI_", "TEMPORAL_", "DURABLE_MANUS_")
"""Variables a test's CLI never inherits (as in testkit.e2e.run_cli)."""
SAVED_LOGGERS = ("", "temporalio", "temporalio.activity")
"""Loggers whose set-up the starter changes (runtime/cli.py cli_runtime)."""


def cli_environment(child_env: Mapping[str, str]) -> dict[str, str]:
    """What an in-process call needs of testkit.e2e.child_env's environment: the
    variables the product reads, not the whole process's (PATH, TMPDIR, ...)."""
    names = ("WORKSPACE_ROOT", "HOME", "XDG_CONFIG_HOME")
    child_only = ("DURABLE_MANUS_WORKER_IDLE_EXIT",)  # an in-process call's worker stays in-process
    return {
        k: v for k, v in child_env.items() if (k.startswith(CLEAN_PREFIXES) or k in names) and k not in child_only
    }


@dataclass(frozen=True)
class Outcome:
    """What a CLI call gave: as subprocess.CompletedProcess has it."""

    returncode: int
    stdout: str
    stderr: str


class InProcessCli:
    """Call starter.py's or worker.py's main(argv) as `python SCRIPT ARGS` would run it."""

    def __init__(self, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
        self.capsys, self.monkeypatch = capsys, monkeypatch

    def __call__(
        self, *args: str | bytes, env_extra: Mapping[str, str | None] | None = None, script: str = "starter.py"
    ) -> Outcome:
        """`args` (bytes as the OS would decode them), Temporal unreachable and
        OPENAI_API_KEY=sk-test unless `env_extra` says otherwise (None removes)."""
        argv = [os.fsdecode(arg) for arg in args]
        self._environment(env_extra or {})
        main = self._main(script)
        self.capsys.readouterr()  # what came before is not this call's
        with _logging_restored():
            try:
                code = main(argv)
            except SystemExit as e:  # argparse's --help
                code = e.code if isinstance(e.code, int) else 0
        out = self.capsys.readouterr()
        return Outcome(code, out.out, out.err)

    async def in_thread(self, *args: str | bytes, env_extra: Mapping[str, str | None] | None = None) -> Outcome:
        """As calling it, from an async test: main runs its own event loop, so
        it goes to a thread while the test's loop (and its worker) go on."""
        return await asyncio.to_thread(self, *args, env_extra=env_extra)

    def _environment(self, extra: Mapping[str, str | None]) -> None:
        for name in [n for n in os.environ if n.startswith(CLEAN_PREFIXES)]:
            self.monkeypatch.delenv(name)
        self.monkeypatch.setenv("TEMPORAL_ADDRESS", "127.0.0.1:9")
        self.monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        # A worker the command starts runs in this process and stops with it,
        # as the calls' tests expect (no detached worker.py outliving the test).
        self.monkeypatch.setenv("DURABLE_MANUS_WORKER_IDLE_EXIT", "0")
        for name, value in extra.items():
            if value is None:
                self.monkeypatch.delenv(name, raising=False)
            else:
                self.monkeypatch.setenv(name, value)

    @staticmethod
    def _main(script: str):
        if script == "starter.py":
            import starter

            return starter.main
        if script == "worker.py":
            import worker

            return worker.main
        raise ValueError(f"no entry script {script!r}")


class _logging_restored:
    """The loggers' handlers, levels and propagation as they were, and the
    starter's log gate open: a call leaves no trace on the tests after it."""

    def __enter__(self) -> None:
        self.saved = [
            (logger, list(logger.handlers), logger.level, logger.propagate)
            for logger in map(logging.getLogger, SAVED_LOGGERS)
        ]

    def __exit__(self, *exc: object) -> None:
        for logger, handlers, level, propagate in self.saved:
            logger.handlers[:] = handlers
            logger.setLevel(level)
            logger.propagate = propagate
        cli_module.mute_temporal_logs(False)
