"""The worker a starter command runs in its own process when the run needs one."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import sys
from typing import TYPE_CHECKING, TextIO

from temporalio.client import Client

from config.settings import DEFAULT_TASK_QUEUE, ConfigError, Settings
from runtime.ad_hoc_mcp import AD_HOC_SERVER
from runtime import run_control
from runtime.connection import is_unreachable
from runtime.detached_worker import DetachedWorker, ensure_detached_worker, idle_exit_seconds, recorded_worker
from runtime.follow import ServerLost, Stall
from runtime.task_queue import live_workers
from runtime.user_errors import WorkerUnavailable

if TYPE_CHECKING:
    from runtime.worker_set import WorkerSet

STOP_MARGIN_SECONDS = 10.0
"""Beyond its activities' grace period, how long the in-process worker may
take to stop: time to report them to the server."""


def worker_command(settings: Settings) -> str:
    """The command that starts a worker for this starter's task queue."""
    queue = settings.task_queue
    return "python worker.py" if queue == DEFAULT_TASK_QUEUE else f"TEMPORAL_TASK_QUEUE={queue} python worker.py"


def refuse_unrunnable_worker(settings: Settings, mode: str, server_missing: bool) -> None:
    """Before any server is reached or started: when this command will surely
    run its own worker (--worker always, or auto with no server yet, so no
    other worker either), a config that cannot run one is an error now."""
    if mode == "always" or (mode == "auto" and server_missing):
        settings.require_workspace_root()
        settings.require_api_keys()


class InProcessWorker:
    """The worker this process runs for the command, if any.

    It starts at once when no worker is alive on the task queue (or with
    --worker always). When the task queue lists workers that may be alive, it
    is only made ready: it starts if the run's next task then waits for a
    worker (see Watch), because the list can name a worker that exited a minute
    ago, on another machine. Several workers on one queue are fine, so a wrong
    guess costs an idle worker, never a stuck run.
    """

    def __init__(
        self, client: Client, settings: Settings, stack: contextlib.AsyncExitStack, out: TextIO | None = None
    ) -> None:
        """out: where to say that a worker is being started (its build takes seconds)."""
        self.client, self.settings, self.stack, self.out = client, settings, stack, out
        self.worker: WorkerSet | None = None
        self.unavailable: str | None = None
        """Why this process cannot run a worker, when it cannot."""
        self.running = False
        self.live: list[str] = []
        """Workers the task queue lists that may be alive."""
        self.detachable = False
        """A worker this command starts is a detached one (runtime/detached_worker.py)."""
        self.detached: DetachedWorker | None = None
        """The detached worker that serves this command's runs, once known."""
        self._watching: asyncio.Task | None = None
        """The check for edited config files, while this process runs a worker."""

    def _build(self) -> WorkerSet:
        # Here, not at the top: only a command that runs a worker pays for the worker stack.
        from activities.tools.sandbox import SandboxUnavailable
        from runtime.worker_factory import build_worker, check_worker_settings

        self.settings.require_workspace_root()
        try:
            return build_worker(self.client, self.settings, check_worker_settings(self.settings))
        except SandboxUnavailable as e:
            raise WorkerUnavailable(str(e)) from None

    async def prepare(self, mode: str) -> None:
        """Checked before anything starts: a worker that is needed and cannot
        run is an error now, not a half-begun run."""
        if mode == "never":
            self.unavailable = "--worker never"
            return
        if mode == "auto":
            self.live = await live_workers(self.client, self.settings.task_queue)
            self.detachable = idle_exit_seconds() > 0 and AD_HOC_SERVER not in self.settings.mcp_servers
            if self.detachable:
                found = recorded_worker(self.settings, self._address, self.client.namespace)
                self.detached = found if found is not None and self._identity(found.pid) in self.live else None
                if self.detached is not None and self.out is not None:
                    self._say(f"{self.detached.where()} serves task queue {self.settings.task_queue} in the background")
                if not self.live:
                    await self._start_detached()
                return
        if mode == "always" or not self.live:
            if self.out is not None:
                print(f"starting a worker in this process (task queue {self.settings.task_queue})...", file=self.out, flush=True)
            self.worker = self._build()
            await self.start()
            return
        try:
            self.worker = self._build()
        except (ConfigError, WorkerUnavailable) as e:
            self.unavailable = str(e)

    @property
    def _address(self) -> str:
        return self.client.service_client.config.target_host

    @staticmethod
    def _identity(pid: int) -> str:
        return f"{pid}@{socket.gethostname()}"  # the SDK's default worker identity

    async def _polls(self, pid: int) -> bool:
        return self._identity(pid) in await live_workers(self.client, self.settings.task_queue)

    def _say(self, line: str) -> None:
        # A command that prints no run (show, answer, ...) says it on stderr, not among its own output.
        print(line, file=self.out or sys.stderr, flush=True)

    async def _start_detached(self) -> None:
        idle = idle_exit_seconds()
        self._say(f"starting a worker for task queue {self.settings.task_queue} in the background...")
        self.detached, started = await ensure_detached_worker(
            self.settings, self._address, self.client.namespace, self._polls, idle, self._say
        )
        how = "started" if started else "already running"
        self._say(
            f"{self.detached.where()} {how}: it outlives this command, and exits {idle:g} s after the "
            "last run on its task queue ends"
        )

    def interrupted_line(self, run_id: str) -> str:
        """What becomes of the run when the user stops following it (Ctrl-C)."""
        again = f"python starter.py attach {run_id}"
        if self.detached is not None and self.detached.alive():
            return f"stopped following; the run goes on in {self.detached.where()}; follow it again with: {again}"
        if self.running:
            return (
                "stopped following; the worker of this command stopped with it, so the run waits for a worker: "
                f"resume it with: {again} (or start `{worker_command(self.settings)}`)"
            )
        if self.live:
            return f"stopped following; the run goes on (on {', '.join(self.live[:3])}); follow it again with: {again}"
        return f"stopped following; the run waits for a worker: start `{worker_command(self.settings)}`, or resume it with: {again}"

    async def start(self) -> bool:
        """Start the worker if it is ready and not running; True when it runs.
        It stops when the command's AsyncExitStack closes."""
        if self.detachable:
            if self.detached is None or not self.detached.alive():
                await self._start_detached()
            return True
        if not self.running and self.worker is not None:
            from runtime.config_report import ConfigWatch, watch_config
            from runtime.worker_factory import harden_worker_process

            harden_worker_process()
            await self.worker.__aenter__()
            self.stack.push_async_exit(self._stop)
            self.running = True
            # As worker.py does: an edited config reaches a worker only when it restarts, so say so.
            self._watching = asyncio.create_task(watch_config(ConfigWatch.of(self.settings), say=self._say_on_stderr))
        return self.running

    @staticmethod
    def _say_on_stderr(line: str) -> None:
        print(line, file=sys.stderr, flush=True)  # stdout may be the MCP protocol's

    async def _stop(self, exc_type, exc, tb) -> bool:
        assert self.worker is not None
        if self._watching is not None:
            self._watching.cancel()
        if exc_type is ServerLost or is_unreachable(exc):
            return False  # a worker cannot hand its tasks back to a server that is gone
        from runtime.worker_factory import GRACEFUL_SHUTDOWN

        try:
            await asyncio.wait_for(
                self.worker.__aexit__(exc_type, exc, tb), GRACEFUL_SHUTDOWN.total_seconds() + STOP_MARGIN_SECONDS
            )
        except asyncio.TimeoutError:
            pass  # left behind: the process exits without waiting for it (see starter.main)
        return False

    async def start_unless_answered(self, run_id: str) -> None:
        """For a command that needs a worker to answer for `run_id` now: start
        this one unless a live worker answers for the run."""
        if self.detachable:
            if (self.detached is None or not self.detached.alive()) and not await run_control.worker_answers(
                self.client, run_id
            ):
                await self.start()
            return
        if not self.running and self.worker is not None and not await run_control.worker_answers(self.client, run_id):
            await self.start()

    async def on_stall(self, run_id: str, waited: float) -> Stall | None:
        if self.detachable:
            if self.detached is not None and self.detached.alive():
                return None  # it is ours and alive: busy, or about to take the task
            listed = ", ".join(self.live[:3]) or "none"
            await self.start()
            assert self.detached is not None
            return Stall(
                f"no worker took run {run_id}'s task within {waited:.0f} s (the task queue listed {listed}); "
                f"the run goes on in {self.detached.where()}",
                resolved=True,
            )
        if self.running:
            return None
        if await self.start():
            listed = ", ".join(self.live[:3])
            return Stall(
                f"no worker took run {run_id}'s task within {waited:.0f} s (the task queue lists {listed}, which "
                "has probably exited); running one in this process",
                resolved=True,
            )
        if self.unavailable == "--worker never":
            fix = f"Start one with `{worker_command(self.settings)}`, or run this command without --worker never."
        else:
            fix = f"Start one with `{worker_command(self.settings)}` (this starter cannot run one: {self.unavailable})."
        return Stall(
            f"waiting for a worker: no worker has taken run {run_id}'s next task for {waited:.0f} s, and nothing "
            f"runs until one does. {fix}"
        )
