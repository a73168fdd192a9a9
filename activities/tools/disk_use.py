"""How much disk a run directory holds, and how much the disk under it has left.

Used by the call guard (run as a script, so standard library only), the
process tools and the editor. A run's share is its directory's allocated
blocks, every entry counting at least one block, so a million empty files
weigh as much as a million small ones; a file the call deleted but holds
open counts too. Counting stops as soon as the total passes the limit
asked about, which bounds each scan by the quota itself.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterable

MiB = 1024**2
GiB = 1024**3

DEFAULT_RUN_BYTES = GiB
"""Disk one run's directory may hold ([tools] run_disk_mb)."""

BLOCK = 4096
"""Least an entry counts for: its inode and directory entry take room too."""

RESERVE_SHARE = 0.05
RESERVE_CAP = GiB
"""Free space kept for everyone else on the workspace's filesystem (the
Temporal server, other runs): 5 % of it, at most 1 GiB. No tool write starts
below it, and a call that brings the disk below it is stopped."""

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


def _charge(status: os.stat_result) -> int:
    return max(status.st_blocks * 512, BLOCK)


def tree_bytes(path: str | os.PathLike, stop_above: int, *, dir_fd: int | None = None) -> int | None:
    """Bytes the tree at `path` (relative to `dir_fd` if given) holds (see
    the module's docstring), or a count above `stop_above` once it passes it.
    0 when it does not exist. None when part of it cannot be read (a
    directory closed to the worker, nested deeper than the open file limit
    allows, or no directory at all): such a tree cannot be measured."""
    try:
        top = os.open(path, _DIR_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        return 0
    except OSError:
        return None
    # One descriptor per level, each with the subdirectories still to visit.
    stack: list[tuple[int, list[str]]] = []
    fd: int | None = top  # opened, not yet listed
    try:
        total = _charge(os.fstat(top))
        while fd is not None or stack:
            if fd is not None:
                charged, subdirs = _listed(fd)
                total += charged
                stack.append((fd, subdirs))
                fd = None
            if total > stop_above:
                return total
            parent, todo = stack[-1]
            if not todo:
                os.close(stack.pop()[0])
                continue
            try:
                fd = os.open(todo.pop(), _DIR_FLAGS, dir_fd=parent)
            except OSError as e:
                if e.errno not in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
                    raise  # EACCES, EMFILE: this part cannot be seen
        return total
    except OSError:
        return None
    finally:
        if fd is not None:
            os.close(fd)
        for held, _ in stack:
            os.close(held)


def _listed(fd: int) -> tuple[int, list[str]]:
    """What the entries of directory `fd` count for, and its subdirectories' names."""
    charged = 0
    subdirs: list[str] = []
    with os.scandir(fd) as entries:
        for entry in entries:
            try:
                status = entry.stat(follow_symlinks=False)
            except FileNotFoundError:  # deleted since it was listed
                continue
            charged += _charge(status)
            if stat.S_ISDIR(status.st_mode):
                subdirs.append(entry.name)
    return charged, subdirs


def deleted_open_bytes(pids: Iterable[int], device: int) -> int:
    """Bytes on `device` held by files that processes `pids` keep open after
    deleting them (or made with O_TMPFILE): no scan of the tree sees them, yet
    they fill the disk until the last descriptor closes. Each file counts once;
    a process gone or closed to the caller counts for nothing."""
    seen: set[int] = set()
    total = 0
    for pid in pids:
        fd_dir = f"/proc/{pid}/fd"
        try:
            names = os.listdir(fd_dir)
        except OSError:
            continue
        for name in names:
            try:
                status = os.stat(f"{fd_dir}/{name}")  # the open file itself, not the link
            except OSError:
                continue
            if status.st_nlink == 0 and status.st_dev == device and stat.S_ISREG(status.st_mode) and status.st_ino not in seen:
                seen.add(status.st_ino)
                total += status.st_blocks * 512
    return total


def free_bytes(path: str | os.PathLike | int) -> int:
    """Space an unprivileged writer still has on the filesystem of `path` (or of a descriptor)."""
    info = os.statvfs(path)
    return info.f_bavail * info.f_frsize


def reserve_bytes(path: str | os.PathLike) -> int:
    """The free space kept on the filesystem of `path` (RESERVE_SHARE, at most RESERVE_CAP)."""
    info = os.statvfs(path)
    return min(int(info.f_blocks * info.f_frsize * RESERVE_SHARE), RESERVE_CAP)


def over_quota_note(quota: int, adding: int = 0) -> str:
    """What the model is told; `adding`: the size of a write that was refused."""
    share = f"its {quota / MiB:g} MiB quota; delete files to go on."
    if adding > 0:
        return f"Nothing was written: {adding} more bytes would put the run directory over {share}"
    return f"The run directory is over {share}"


def low_disk_note(reserve: int) -> str:
    return (
        f"The workspace's disk is nearly full (less than {reserve / MiB:g} MiB free, kept for the "
        "rest of the machine): python_execute, bash and the editor's writes are refused until the "
        "operator frees space."
    )
