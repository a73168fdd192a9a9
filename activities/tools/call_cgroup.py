"""A cgroup per tool call: at most N processes and M bytes of memory for all
the call's processes together, and a way to kill every one of them.

Works with cgroup v2 (a delegated subtree of the worker's own cgroup) and with
v1 (the worker's own group in the `pids` and `memory` hierarchies, else their
roots). Controllers the worker cannot use are left out and reported at start;
rlimits still cap each process (activities/tools/process.py).

Each worker keeps its calls' groups under a folder of its own
(`worker-<pid>-<random>`), which it holds an flock on for as long as it
lives. A folder whose lock can be taken belongs to a worker that is gone
(SIGKILLed before cleaning up): the next worker that starts empties and
removes it. The lock, not the pid, decides, so workers in other pid
namespaces (containers sharing the cgroup tree) never touch each other's
groups.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
import signal
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

CGROUP_ROOT = Path("/sys/fs/cgroup")
PARENT_NAME = "durable-manus-tools"


@dataclass(frozen=True)
class CallGroup:
    """The directories of one call's cgroup (one per v1 hierarchy, one for v2)."""

    dirs: tuple[Path, ...]

    @property
    def procs_files(self) -> list[str]:
        return [str(d / "cgroup.procs") for d in self.dirs]

    def oom_kills(self) -> int:
        """Processes the kernel killed because the call hit its memory cap."""
        for d in self.dirs:
            for name in ("memory.events", "memory.oom_control"):
                with contextlib.suppress(OSError, ValueError):
                    for line in (d / name).read_text().splitlines():
                        key, _, value = line.partition(" ")
                        if key == "oom_kill":
                            return int(value)
        return 0

    def remove(self) -> None:
        """Kill every process still in it and remove it."""
        for d in self.dirs:
            empty_and_remove(d)


@dataclass(frozen=True)
class CallCgroups:
    """Where this worker makes its calls' groups, and the caps they get."""

    parents: dict[str, Path]
    """Controller ("pids", "memory") -> this worker's folder for it."""
    version: int
    memory_bytes: int
    max_pids: int

    @classmethod
    def detect(cls, *, memory_bytes: int, max_pids: int) -> "CallCgroups | None":
        own = _own_groups()
        if "" in own:  # cgroup v2 (unified): one tree for all controllers
            parents = _v2_parents(own[""], memory_bytes > 0)
            version = 2
        else:
            parents = {c: p for c in ("pids", "memory") if (p := _v1_parent(c, own.get(c))) is not None}
            version = 1
        if not parents:
            return None
        for parent in parents.values():
            _remove_stale(parent.parent)
        return cls(parents=parents, version=version, memory_bytes=memory_bytes, max_pids=max_pids)

    def describe(self) -> str:
        parts = []
        if "pids" in self.parents:
            parts.append(f"at most {self.max_pids} processes")
        if "memory" in self.parents:
            parts.append(f"{self.memory_bytes // 1024**2} MiB of memory")
        missing = [c for c in ("pids", "memory") if c not in self.parents]
        text = f"per call (cgroup v{self.version}): " + ", ".join(parts)
        if missing:
            text += f"; no {' or '.join(missing)} controller (per-process rlimits only)"
        return text

    @contextlib.contextmanager
    def call(self) -> Iterator[CallGroup | None]:
        """A fresh group for one call; every process still in it is killed and
        the group removed afterwards."""
        group = self.make("call")
        try:
            yield group
        finally:
            if group is not None:
                group.remove()

    def make(self, kind: str, own_pids: int = 0) -> CallGroup | None:
        """A new group with the caps (`kind`: "call", "run"); None if it cannot
        be made (the call then has rlimits only). own_pids: processes of the
        sandbox itself that live in the group beside the call's."""
        name = f"{kind}-{uuid.uuid4().hex[:12]}"
        made: list[Path] = []
        try:
            for controller, parent in self.parents.items():
                group = parent / name
                if group in made:
                    continue
                group.mkdir()
                made.append(group)
                self._limit(group, controller, own_pids)
        except OSError as e:
            log.warning("tool sandbox: cannot create the call's cgroup (%s); it runs with rlimits only", e)
            for group in made:
                empty_and_remove(group)
            return None
        return CallGroup(tuple(made))

    def _limit(self, group: Path, controller: str, own_pids: int) -> None:
        if self.version == 2:
            if "pids" in self.parents:
                (group / "pids.max").write_text(str(self.max_pids + own_pids))
            if "memory" in self.parents:
                (group / "memory.max").write_text(str(self.memory_bytes))
                with contextlib.suppress(OSError):  # no swap accounting: nothing to cap
                    (group / "memory.swap.max").write_text("0")
        elif controller == "pids":
            (group / "pids.max").write_text(str(self.max_pids + own_pids))
        else:
            (group / "memory.limit_in_bytes").write_text(str(self.memory_bytes))
            with contextlib.suppress(OSError):
                (group / "memory.memsw.limit_in_bytes").write_text(str(self.memory_bytes))


def kill_all(procs_files: list[str]) -> None:
    """SIGKILL every process listed in the groups' cgroup.procs files."""
    for procs in procs_files:
        try:
            with open(procs) as f:
                pids = [int(p) for p in f.read().split()]
        except (OSError, ValueError):
            continue
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)


def empty_and_remove(group: Path) -> None:
    for _ in range(100):
        kill_all([str(group / "cgroup.procs")])
        try:
            group.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.02)
    log.warning("tool sandbox: could not remove %s", group)


def _own_groups() -> dict[str, str]:
    """Controller -> this process's group path ("" -> the v2 path)."""
    groups: dict[str, str] = {}
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return groups
    for line in lines:
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(",") if controllers else [""]:
            groups[controller] = path
    if "" in groups and any(c in groups for c in ("pids", "memory")):
        del groups[""]  # hybrid: the v2 tree has no controllers, v1 has them
    return groups


_own_folders: dict[Path, tuple[Path, int]] = {}
"""base -> (this process's folder there, the descriptor holding its lock)."""

_LEGACY_FOLDER = re.compile(r"worker-(\d+)")
"""Folders of versions that held no lock: their pid alone tells."""


def _worker_folder(base: Path) -> Path:
    """<base>/durable-manus-tools/worker-<pid>-<random>, created and locked
    for as long as this process lives."""
    own = _own_folders.get(base)
    if own is not None and own[0].is_dir():
        return own[0]
    parent = base / PARENT_NAME
    parent.mkdir(parents=True, exist_ok=True)
    for _ in range(3):
        folder = parent / f"worker-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        folder.mkdir()
        fd = _lock(folder)
        # Another worker's sweep may have taken the new, unlocked folder away
        # between mkdir and flock: only a lock on the folder still there counts.
        if fd is not None and _same_inode(folder, fd):
            _own_folders[base] = (folder, fd)
            return folder
        if fd is not None:
            os.close(fd)
    raise OSError(f"cannot hold a folder of its own in {parent}")


def _lock(folder: Path) -> int | None:
    """A descriptor holding `folder`'s lock, or None when a live worker holds it."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def _same_inode(folder: Path, fd: int) -> bool:
    try:
        return os.stat(folder).st_ino == os.fstat(fd).st_ino
    except OSError:
        return False


def _release_folder(base: Path) -> None:
    """Give up this process's folder in `base` (a hierarchy it cannot use)."""
    folder, fd = _own_folders.pop(base)
    with contextlib.suppress(OSError):
        folder.rmdir()
    os.close(fd)


def _v1_parent(controller: str, own: str | None) -> Path | None:
    hierarchy = CGROUP_ROOT / controller
    candidates = [hierarchy / own.lstrip("/")] if own else []
    candidates.append(hierarchy)
    limit_file = "pids.max" if controller == "pids" else "memory.limit_in_bytes"
    for base in candidates:
        try:
            folder = _worker_folder(base)
        except OSError:
            continue
        try:
            probe = folder / f"probe-{uuid.uuid4().hex[:8]}"
            probe.mkdir()
            usable = (probe / limit_file).exists()
            probe.rmdir()
        except OSError:
            usable = False
        if usable:
            return folder
        _release_folder(base)
    return None


def _v2_parents(own: str, want_memory: bool) -> dict[str, Path]:
    base = CGROUP_ROOT / own.lstrip("/")
    try:
        folder = _worker_folder(base)
        available = (folder.parent / "cgroup.controllers").read_text().split()
    except OSError:
        return {}
    wanted = [c for c in ("pids", "memory") if c in available and (c != "memory" or want_memory)]
    enabled = []
    for controller in wanted:
        try:  # children of each folder need the controller switched on
            (folder.parent / "cgroup.subtree_control").write_text(f"+{controller}")
            (folder / "cgroup.subtree_control").write_text(f"+{controller}")
            enabled.append(controller)
        except OSError:
            continue
    return {c: folder for c in enabled}


def _remove_stale(parent: Path) -> None:
    """Remove the folders of workers that died without cleaning up: those
    whose lock is free, with their calls' and runs' groups (and the
    call-<pid>-<id> groups and pid-named folders of earlier versions, by
    their pid)."""
    for group in parent.glob("call-*"):
        with contextlib.suppress(IndexError, ValueError):
            if not Path(f"/proc/{int(group.name.split('-')[1])}").exists():
                empty_and_remove(group)
    own = {folder for folder, _ in _own_folders.values()}
    for folder in parent.glob("worker-*"):
        if folder in own:
            continue
        try:
            lock = _lock(folder)
        except OSError:
            continue
        if lock is None:
            continue  # its worker lives, in whatever pid namespace
        try:
            legacy = _LEGACY_FOLDER.fullmatch(folder.name)
            if legacy and Path(f"/proc/{legacy[1]}").exists():
                continue
            for group in folder.iterdir():  # call-* groups, and run-* of the runs' sandboxes
                if group.is_dir():
                    empty_and_remove(group)
            with contextlib.suppress(OSError):
                folder.rmdir()
        finally:
            os.close(lock)
