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
- puts the command into the call's cgroup and applies the rlimits and a
  private umask (files 0600, directories 0700) before exec;
- watches the run directory's disk use a few times a second (disk_use.py;
  files the call's processes deleted but hold open count too) and kills
  the call when it grows past the run's quota, or when the disk falls below the reserve kept for the rest of the machine; it says which on
  the verdict pipe. A call that starts over the quota may delete, but is
  killed if it grows. A directory it cannot measure counts as over the
  quota; a call that starts that way is held to the disk's free space instead.

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
from collections.abc import Callable

TYPE_CHECKING = False  # set by type checkers only, which see this file as a module of the package
if TYPE_CHECKING:
    from activities.tools import disk_use
else:
    if "disk_use" not in sys.modules:  # else a run sandbox's loader has it (activities/tools/run_sandbox.py)
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # -I leaves the script's directory out
    import disk_use

_PR_SET_PDEATHSIG = 1

DISK_CHECK_INTERVAL = 0.1
"""Least seconds between two looks at the run directory."""
DISK_CHECK_SHARE = 4
"""A look waits at least this many times as long as the last scan took, so a
large run directory costs the guard at most a fifth of a core."""

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
    options: dict = {
        "lease_fd": None, "lease": 3.0, "hold": [], "cgroup": [], "rlimit": [],
        "disk_dir": None, "disk_quota": 0, "disk_floor": 0, "verdict_fd": None,
    }
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
        elif key == "disk-dir":
            options["disk_dir"] = value
        elif key in ("disk-quota", "disk-floor", "verdict-fd"):
            options[key.replace("-", "_")] = int(value)
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
            set_rlimit(which, soft, hard)
        os.umask(0o077)  # the run's files are the run's alone
        os.execvp(command[0], command)
    except BaseException as e:  # noqa: BLE001 - the child must never return into the guard
        os.write(2, f"call_guard: cannot start {command[0]}: {e}\n".encode())
    os._exit(127)


def set_rlimit(which: int, soft: int, hard: int) -> None:
    _, current_hard = resource.getrlimit(which)
    if current_hard != resource.RLIM_INFINITY:  # a hard limit can only be lowered
        soft, hard = min(soft, current_hard), min(hard, current_hard)
    resource.setrlimit(which, (soft, hard))


def cgroup_pids(cgroups: list[str]) -> set[int]:
    found: set[int] = set()
    for procs in cgroups:
        try:
            with open(procs) as f:
                found.update(int(p) for p in f.read().split())
        except (OSError, ValueError):
            continue
    return found


def descendants(pid: int) -> set[int]:
    """`pid` and the processes below it (for a call without a cgroup)."""
    found, todo = set(), [pid]
    while todo:
        current = todo.pop()
        if current in found:
            continue
        found.add(current)
        try:
            tasks = os.listdir(f"/proc/{current}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                with open(f"/proc/{current}/task/{task}/children") as f:
                    todo.extend(int(p) for p in f.read().split())
            except (OSError, ValueError):
                continue
    return found


KILL_SWEEPS = 50
"""Reads of the call's cgroups after the kill, 10 ms apart: a process forked
while the list was read is in the next one."""


def kill(pid: int, cgroups: list[str]) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    for procs in cgroups:
        # cgroup v2's cgroup.kill ends the whole group at once, forks included.
        try:
            with open(os.path.join(os.path.dirname(procs), "cgroup.kill"), "w") as f:
                f.write("1")
        except OSError:
            pass
    kill_until_none_left(lambda: cgroup_pids(cgroups))


def kill_until_none_left(find: Callable[[], set[int]]) -> None:
    """SIGKILL what `find` lists, pass after pass (KILL_SWEEPS, 10 ms apart):
    a process forked during one pass is found by the next."""
    for _ in range(KILL_SWEEPS):
        left = find()
        if not left:
            return
        for other in left:
            try:
                os.kill(other, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.01)


class DiskWatch:
    """The run directory's share of the disk, looked at between two waits."""

    def __init__(self, path: str, quota: int, floor: int) -> None:
        # Held open, so that whatever becomes of the name, the same directory is watched.
        self.fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        self.device = os.fstat(self.fd).st_dev
        self.quota, self.floor = quota, floor
        self.call_pids: Callable[[], set[int]] = set
        """The call's processes, whose deleted but open files count too."""
        start = disk_use.tree_bytes(".", 2 * quota, dir_fd=self.fd)
        # Over the quota already: the call may delete, not grow. Not
        # measurable: the disk's free space may not drop by more than the quota.
        self.limit = None if start is None else max(quota, start)
        self.free_at_start = disk_use.free_bytes(self.fd)
        self.due = time.monotonic() + DISK_CHECK_INTERVAL

    def verdict(self) -> str | None:
        """"quota" or "reserve" when the call must stop, else None."""
        began = time.monotonic()
        if began < self.due:
            return None
        free = disk_use.free_bytes(self.fd)
        if free < self.floor:
            return "reserve"
        if self.limit is None:
            over = self.free_at_start - free > self.quota
        else:
            used = disk_use.tree_bytes(".", self.limit, dir_fd=self.fd)
            if used is not None and used <= self.limit:
                used += disk_use.deleted_open_bytes(self.call_pids(), self.device)
            over = used is None or used > self.limit
        if over:
            return "quota"
        now = time.monotonic()
        self.due = now + max(DISK_CHECK_INTERVAL, DISK_CHECK_SHARE * (now - began))
        return None


def supervise(
    pid: int,
    lease_fd: int | None,
    lease: float,
    kill_call: Callable[[], None],
    disk: DiskWatch | None = None,
    verdict_fd: int | None = None,
    done_fd: int | None = None,
) -> int | None:
    """Wait for the child; kill the call (`kill_call`) if the lease lapses or
    the disk check says so. Returns the child's wait status, or None when
    `done_fd` became readable first (a kernel that finished a call lives on)."""
    poller = select.poll()
    child_fd = os.pidfd_open(pid)
    try:
        poller.register(child_fd, select.POLLIN)
        if lease_fd is not None:
            poller.register(lease_fd, select.POLLIN)
        if done_fd is not None:
            poller.register(done_fd, select.POLLIN)
        lease_due = time.monotonic() + lease
        while True:
            wake = ([lease_due] if lease_fd is not None else []) + ([disk.due] if disk is not None else [])
            timeout_ms = max(0, int((min(wake) - time.monotonic()) * 1000) + 1) if wake else None
            ready = {fd for fd, _ in poller.poll(timeout_ms)}
            if child_fd in ready:
                break
            if done_fd is not None and done_fd in ready:
                return None
            if lease_fd in ready:
                if not os.read(lease_fd, 4096):
                    kill_call()  # the worker is gone
                    break
                lease_due = time.monotonic() + lease
            elif lease_fd is not None and time.monotonic() >= lease_due:
                kill_call()  # the lease lapsed
                break
            verdict = disk.verdict() if disk is not None else None
            if verdict is not None:
                if verdict_fd is not None:
                    try:
                        os.write(verdict_fd, verdict.encode())
                    except OSError:  # the worker stopped listening; the kill is what matters
                        pass
                kill_call()
                break
    finally:
        os.close(child_fd)
    _, status = os.waitpid(pid, 0)
    return status


def open_files_for_scans() -> None:
    """A scan holds one descriptor per directory level: allow as many as the
    hard limit does (the command gets its own, lower limit)."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError):  # an unlimited hard limit: keep the soft one
        pass


def main(argv: list[str]) -> None:
    options, command = parse(argv)
    own = [fd for fd in (options["lease_fd"], options["verdict_fd"]) if fd is not None]
    for fd in options["hold"] + own:
        os.set_inheritable(fd, False)  # the lock, the lease and the verdict stay with the guard
    disk = None
    if options["disk_dir"] is not None:
        open_files_for_scans()
        disk = DiskWatch(options["disk_dir"], options["disk_quota"], options["disk_floor"])
    pid = start(command, options["cgroup"], options["rlimit"])
    cgroups = options["cgroup"]
    if disk is not None:
        disk.call_pids = (lambda: cgroup_pids(cgroups)) if cgroups else (lambda: descendants(pid))
    status = supervise(
        pid, options["lease_fd"], options["lease"], lambda: kill(pid, cgroups), disk, options["verdict_fd"]
    )
    assert status is not None  # no done_fd: only the child's end ends the wait
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if number not in (signal.SIGKILL, signal.SIGSTOP):  # these two keep their default
            signal.signal(number, signal.SIG_DFL)
        os.kill(os.getpid(), number)
    sys.exit(os.waitstatus_to_exitcode(status) if not os.WIFSIGNALED(status) else 128 + os.WTERMSIG(status))


if __name__ == "__main__":
    main(sys.argv[1:])
