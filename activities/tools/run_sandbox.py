"""One sandbox per run, entered by each of its tool calls (the worker's side
of activities/tools/exec_server.py).

A run's first process call starts bubblewrap once, with the exec server
inside; later calls of the run on this worker are sent to it over a socket,
which costs a fork and an exec instead of a new sandbox and a guard's Python.
A sandbox is closed when it has been idle for IDLE_SECONDS, when this worker
holds more than MAX_SANDBOXES, and with the worker (bubblewrap dies with its
parent). A sandbox that cannot start, or dies, is not an error: the call
runs the per-call way (a sandbox and a guard of its own), equally confined.
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import functools
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Protocol

from activities.tools import seccomp_filter

from activities.tools.privileges import no_new_privs

if TYPE_CHECKING:
    from activities.tools.call_cgroup import CallCgroups, CallGroup


class Confinement(Protocol):
    """What a run's sandbox needs of the worker's tool sandbox (activities/tools/sandbox.py ToolSandbox)."""

    @property
    def cgroups(self) -> CallCgroups | None: ...

    def command(self, argv: list[str], *, run_dir: Path, cwd: Path, seccomp_fd: int | None = None) -> list[str]: ...

    def environment(self, run_dir: Path) -> dict[str, str]: ...

log = logging.getLogger(__name__)

IDLE_SECONDS = 120.0
"""A run's sandbox ends after this long without a call: long enough for the
think between two calls, short enough that an ended run's sandbox goes soon."""
MAX_SANDBOXES = 64
"""Sandboxes one worker keeps (each an idle Python of ~10 MB); the least
recently used goes first."""
START_TIMEOUT = 15.0
"""Seconds a new sandbox may take to say it is ready (bwrap and a Python start)."""
SANDBOX_PIDS = 3
"""Processes of the sandbox itself in its cgroup: bubblewrap, its init and the
server; the pids cap is raised by as many, so the calls keep theirs whole."""
REPLY_GRACE = 5.0
"""Seconds to wait for a call's status after its lease was ended (the kill
itself takes milliseconds); past it the whole sandbox is killed."""

SERVER_FILES = ("disk_use", "call_guard", "exec_server")
"""The server's modules, in the order they import each other."""
HERE = Path(__file__).parent

LOADER = """
import os, sys, types
for name, fd in zip(sys.argv[1].split(","), map(int, sys.argv[2].split(","))):
    module = types.ModuleType(name)
    module.__file__ = "<durable-manus>/" + name + ".py"
    source = os.pread(fd, os.fstat(fd).st_size, 0)
    os.close(fd)
    sys.modules[name] = module
    exec(compile(source, module.__file__, "exec"), module.__dict__)
sys.modules["exec_server"].main(sys.argv[3:])
"""
"""Run by the sandbox's Python (-I -S -c): the server's modules come from
descriptors the worker filled, so they need no path in the sandbox."""


@dataclass
class CallOutcome:
    status: int | None
    """The command's wait status; None when the sandbox died under the call."""
    kernel: KernelNews | None = None
    """A call run by the run's persistent Python: what became of it."""


@dataclass(frozen=True)
class KernelNews:
    fresh: bool
    """The call started a new kernel (nothing of earlier calls' variables)."""
    ended: str | None
    """Why the kernel ended with this call (its variables are gone), or None: kept."""


@dataclass
class RunSandbox:
    run_dir: Path
    process: subprocess.Popen
    control: socket.socket
    group: CallGroup | None
    """The sandbox's cgroup: every process in it, the server and the call of
    the moment, which only one call of the run at a time can be (the run's
    tool lock), so its caps are the call's."""
    last_used: float = field(default_factory=time.monotonic)

    def alive(self) -> bool:
        return self.process.poll() is None

    def close(self) -> None:
        """Kill it: bubblewrap's init dies with its parent, and the kernel
        kills everything in its pid namespace."""
        with contextlib.suppress(OSError):
            self.control.close()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=5)
        if self.group is not None:
            self.group.remove()


class RunSandboxes:
    """This worker's sandboxes, by run directory."""

    def __init__(self, sandbox: Confinement) -> None:
        self.sandbox = sandbox
        self.running: dict[Path, RunSandbox] = {}

    def close_all(self) -> None:
        for box in self.running.values():
            box.close()
        self.running.clear()

    async def get(self, run_dir: Path) -> RunSandbox | None:
        """The run's sandbox, started if needed; None if it cannot start.
        Called with the run's tool lock held, so one start per run at a time."""
        self._close_stale()
        box = self.running.get(run_dir)
        if box is not None and box.alive():
            box.last_used = time.monotonic()
            return box
        if box is not None:
            self._drop(run_dir)
        try:
            box = await self._start(run_dir)
        except (OSError, asyncio.TimeoutError, ConnectionError) as e:
            log.warning("tool sandbox: a run's sandbox did not start (%s); its calls start one each", e)
            return None
        self.running[run_dir] = box
        return box

    def _drop(self, run_dir: Path) -> None:
        box = self.running.pop(run_dir, None)
        if box is not None:
            box.close()

    def _close_stale(self) -> None:
        now = time.monotonic()
        for run_dir, box in list(self.running.items()):
            if not box.alive() or now - box.last_used > IDLE_SECONDS:
                self._drop(run_dir)
        while len(self.running) >= MAX_SANDBOXES:
            oldest = min(self.running, key=lambda d: self.running[d].last_used)
            self._drop(oldest)

    async def _start(self, run_dir: Path) -> RunSandbox:
        worker_end, server_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        seccomp = seccomp_filter.program_fd()
        sources = [_source_fd(HERE / f"{name}.py") for name in SERVER_FILES]
        cgroups = self.sandbox.cgroups
        group = cgroups.make("run", own_pids=SANDBOX_PIDS) if cgroups is not None else None
        joins = cgroup_fds(group)
        try:
            argv = self.sandbox.command(
                [sys.executable, "-I", "-S", "-c", LOADER, ",".join(SERVER_FILES), ",".join(map(str, sources)),
                 f"--control-fd={server_end.fileno()}", f"--idle={IDLE_SECONDS:g}"],
                run_dir=run_dir,
                cwd=run_dir,
                seccomp_fd=seccomp,
            )
            process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                cwd=run_dir,
                env=self.sandbox.environment(run_dir),
                pass_fds=(server_end.fileno(), seccomp, *sources),
                start_new_session=True,
                preexec_fn=lambda: _join_then(joins, no_new_privs),
            )
        except BaseException:
            if group is not None:
                group.remove()
            raise
        finally:
            server_end.close()
            os.close(seccomp)
            for fd in sources + joins:
                os.close(fd)
        box = RunSandbox(run_dir, process, worker_end, group)
        worker_end.setblocking(False)
        try:
            ready = await asyncio.wait_for(asyncio.get_running_loop().sock_recv(worker_end, 64), START_TIMEOUT)
        except BaseException:
            box.close()
            raise
        if ready != b"ready":
            box.close()
            raise ConnectionError("the sandbox's server ended before it was ready")
        return box


def _join_then(cgroup_procs: list[int], then: Callable[[], None]) -> None:
    """In bubblewrap's process before it starts: into the sandbox's cgroup
    (everything it starts is born there, so no call pays for a move between
    cgroups, which on cgroup v1 costs milliseconds), then `then`."""
    for fd in cgroup_procs:
        os.write(fd, b"0")
    then()


@functools.cache
def kernel_source() -> str:
    """The program of a run's persistent Python (python_kernel.py), given to
    it on its command line: no file of the worker's in the sandbox."""
    return (HERE / "python_kernel.py").read_text()


def _source_fd(path: Path) -> int:
    """A sealed-in-memory copy of one of the server's files."""
    fd = os.memfd_create(f"durable-manus-{path.stem}")  # close-on-exec: passed on explicitly
    os.write(fd, path.read_bytes())
    return fd


def send_call(box: RunSandbox, request: dict, fds: list[tuple[str, int]]) -> None:
    """Hand a call to the server; its descriptors are the server's from here."""
    request = dict(request, fds=[name for name, _ in fds])
    box.control.sendmsg(
        [json.dumps(request).encode()],
        [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd for _, fd in fds]).tobytes())],
    )


def cgroup_fds(group: CallGroup | None) -> list[int]:
    """The group's cgroup.procs files, opened by the worker (/sys is not in
    the sandbox)."""
    if group is None:
        return []
    return [os.open(procs, os.O_WRONLY | os.O_CLOEXEC) for procs in group.procs_files]


async def read_outcome(reply: socket.socket) -> CallOutcome:
    """The call's status from its reply socket (None: the sandbox died)."""
    data = await asyncio.get_running_loop().sock_recv(reply, 4096)
    if not data:
        return CallOutcome(status=None)
    try:
        answer = json.loads(data)
        kernel = answer.get("kernel")
        news = None
        if isinstance(kernel, dict):
            ended = kernel.get("ended")
            news = KernelNews(fresh=bool(kernel.get("fresh")), ended=str(ended)[:200] if ended is not None else None)
        return CallOutcome(status=int(answer["status"]), kernel=news)
    except (ValueError, KeyError, TypeError, AttributeError):
        return CallOutcome(status=None)
