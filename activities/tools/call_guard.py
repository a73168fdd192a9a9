"""The supervisor of one tool call, a small process between the worker and
the sandbox (run as `python -I -S call_guard.py OPTIONS -- argv`).

It exists because the worker itself may stop without dying: a SIGSTOPped or
wedged worker delivers no heartbeats, so Temporal retries the call elsewhere
while this attempt's processes would still run. The guard

- holds the run's tool lock (an flock'ed descriptor the worker hands over)
  until every process of the call is gone, so a retry's guard on any worker
  waits for this attempt to end;
- kills the call when the worker stops renewing its lease (a byte on a pipe,
  written with each heartbeat) for `--lease` seconds, which is shorter than
  the activity's heartbeat timeout, and at once when the worker dies (the
  pipe closes), all of the call's cgroup included; the command itself dies
  with the guard (parent-death signal);
- puts the command into the call's cgroup and applies the rlimits before exec.

It exits with the command's status (death by a signal is passed on as the
same signal). Standard library only, so it starts in ~15 ms.
"""

from __future__ import annotations

import ctypes
import os
import resource
import select
import signal
import sys
import time

_PR_SET_PDEATHSIG = 1

RLIMITS = {
    "AS": resource.RLIMIT_AS,
    "CPU": resource.RLIMIT_CPU,
    "FSIZE": resource.RLIMIT_FSIZE,
    "NOFILE": resource.RLIMIT_NOFILE,
    "NPROC": resource.RLIMIT_NPROC,
    "CORE": resource.RLIMIT_CORE,
}


def parse(argv: list[str]) -> tuple[dict, list[str]]:
    # The worker always passes --lease (process.LEASE_SECONDS); the default is the same.
    options: dict = {"lease_fd": None, "lease": 3.0, "hold": [], "cgroup": [], "rlimit": []}
    split = argv.index("--")
    words, command = argv[:split], argv[split + 1 :]
    for word in words:
        key, _, value = word.lstrip("-").partition("=")
        if key == "lease-fd":
            options["lease_fd"] = int(value)
        elif key == "lease":
            options["lease"] = float(value)
        elif key == "hold":
            options["hold"].append(int(value))
        elif key == "cgroup":
            options["cgroup"].append(value)
        elif key == "rlimit":
            name, _, soft_hard = value.partition(":")
            soft, _, hard = soft_hard.partition(",")
            options["rlimit"].append((RLIMITS[name], int(soft), int(hard or soft)))
        else:
            raise SystemExit(f"call_guard: unknown option {word}")
    return options, command


def start(command: list[str], cgroups: list[str], rlimits: list[tuple[int, int, int]]) -> int:
    guard_pid = os.getpid()
    pid = os.fork()
    if pid:
        return pid
    try:
        # The command dies with its guard, however the guard dies.
        ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != guard_pid:
            os._exit(1)
        for procs in cgroups:  # join before exec, so nothing escapes the caps
            fd = os.open(procs, os.O_WRONLY)
            os.write(fd, b"%d" % os.getpid())
            os.close(fd)
        for which, soft, hard in rlimits:
            _, current_hard = resource.getrlimit(which)
            if current_hard != resource.RLIM_INFINITY:  # a hard limit can only be lowered
                soft, hard = min(soft, current_hard), min(hard, current_hard)
            resource.setrlimit(which, (soft, hard))
        os.execvp(command[0], command)
    except BaseException as e:  # noqa: BLE001 - the child must never return into the guard
        os.write(2, f"call_guard: cannot start {command[0]}: {e}\n".encode())
    os._exit(127)


def kill(pid: int, cgroups: list[str]) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    for procs in cgroups:
        try:
            with open(procs) as f:
                pids = [int(p) for p in f.read().split()]
        except (OSError, ValueError):
            continue
        for other in pids:
            try:
                os.kill(other, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def supervise(pid: int, lease_fd: int | None, lease: float, cgroups: list[str]) -> int:
    """Wait for the child; kill it if the lease lapses. Returns its wait status."""
    poller = select.poll()
    child_fd = os.pidfd_open(pid)
    poller.register(child_fd, select.POLLIN)
    if lease_fd is not None:
        poller.register(lease_fd, select.POLLIN)
    deadline = time.monotonic() + lease
    while True:
        timeout_ms = max(0, int((deadline - time.monotonic()) * 1000)) if lease_fd is not None else None
        ready = {fd for fd, _ in poller.poll(timeout_ms)}
        if child_fd in ready:
            break
        if not ready or (lease_fd in ready and not os.read(lease_fd, 4096)):
            kill(pid, cgroups)  # the lease lapsed, or the worker is gone
            break
        deadline = time.monotonic() + lease
    _, status = os.waitpid(pid, 0)
    return status


def main(argv: list[str]) -> None:
    options, command = parse(argv)
    for fd in options["hold"] + ([options["lease_fd"]] if options["lease_fd"] is not None else []):
        os.set_inheritable(fd, False)  # the lock and the lease stay with the guard
    pid = start(command, options["cgroup"], options["rlimit"])
    status = supervise(pid, options["lease_fd"], options["lease"], options["cgroup"])
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        signal.signal(number, signal.SIG_DFL)
        os.kill(os.getpid(), number)
    sys.exit(os.waitstatus_to_exitcode(status) if not os.WIFSIGNALED(status) else 128 + os.WTERMSIG(status))


if __name__ == "__main__":
    main(sys.argv[1:])
