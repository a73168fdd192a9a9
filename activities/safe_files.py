"""File access beneath a directory that untrusted code may change at any moment.

The worker (often root) reads and writes files in a run's directory, where the
agent's sandboxed tools can, between two system calls of the worker, swap any
entry for a symlink, a FIFO, a device node or a hard link. Path strings are
therefore never checked and then reopened; instead:

- Paths are resolved relative to an open descriptor of the directory
  (`Beneath`), by openat2(2) with RESOLVE_BENEATH where the kernel offers it,
  else by walking one component at a time with O_NOFOLLOW and resolving
  symlinks here (at most MAX_SYMLINKS of them). Symlinks are followed only
  while they stay inside the directory; an absolute symlink counts as inside
  when its target is under the directory's own absolute path. Both ways give
  the same answer: openat2 is only a fast path, and whatever it refuses
  (EXDEV, ELOOP, ...) is decided again by the walk.
- Every open has O_NONBLOCK (opening a FIFO never waits for a peer), O_NOCTTY
  and O_CLOEXEC; what was opened is then checked on the descriptor (fstat):
  only regular files are read or written, and only up to a size limit, read
  with a bound of limit + 1 bytes so that a file growing meanwhile is noticed.
- Writes go only to files with a single link (another name could lie outside
  the directory), new files and directories are created with O_EXCL / mkdirat
  relative to an already-opened parent, and deletion is unlinkat on the parent.
- When the worker runs as root and the directory belongs to someone else (the
  unprivileged uid the tools run as), what it creates is given to that owner.
  What it creates is private to that owner: files 0600, directories 0700.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import stat
from pathlib import Path, PurePosixPath

MAX_FILE_BYTES = 10 * 1024 * 1024
"""Default size limit for reads and writes (10 MiB)."""

MAX_SYMLINKS = 40
"""Symlinks followed while resolving one path (the kernel's own limit)."""

_COMMON = os.O_CLOEXEC | os.O_NOCTTY | os.O_NONBLOCK
_O_PATH = getattr(os, "O_PATH", 0)
# O_PATH needs no read permission and has no side effects; without it (not
# Linux) a read-only descriptor serves for walking through directories.
_WALK_DIR = (_O_PATH or os.O_RDONLY) | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

_OPENAT2_NUMBER = {"x86_64": 437, "aarch64": 437, "arm64": 437}.get(platform.machine())
_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_BENEATH = 0x08
# Errors that may mean openat2 is unusable here (absent, filtered by seccomp, an
# older structure layout); only ENOSYS is taken as certain.
_OPENAT2_MISSING = {errno.ENOSYS, errno.EPERM, errno.EINVAL, errno.E2BIG}


class UnsafeFile(Exception):
    """A path the worker will not use. `problem` completes a sentence whose
    subject is the path, e.g. "is not a regular file (it is a FIFO)"."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path or '.'} {problem}")
        self.path = path
        self.problem = problem


class OutsideRoot(UnsafeFile):
    def __init__(self, path: str) -> None:
        super().__init__(path, "leads outside the directory")


class FileTooLarge(UnsafeFile):
    def __init__(self, path: str, limit: int) -> None:
        super().__init__(path, f"is larger than {_size(limit)}")


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


class _Openat2:
    """openat2(2) through libc's syscall(), or nothing where it is unavailable."""

    def __init__(self) -> None:
        self._number = _OPENAT2_NUMBER
        self.usable = self._number is not None
        if self.usable:
            self._syscall = ctypes.CDLL(None, use_errno=True).syscall
            self._syscall.restype = ctypes.c_long

    def __call__(self, dir_fd: int, path: str, flags: int, mode: int) -> int | None:
        """A descriptor, or None when the walk has to decide; raises OSError for
        answers that are final (ENOENT, EEXIST, EACCES, ...)."""
        if not self.usable or self._number is None:
            return None
        how = _OpenHow(flags, mode, _RESOLVE_BENEATH | _RESOLVE_NO_MAGICLINKS)
        fd = self._syscall(
            ctypes.c_long(self._number),
            ctypes.c_int(dir_fd),
            os.fsencode(path),
            ctypes.byref(how),
            ctypes.c_size_t(ctypes.sizeof(how)),
        )
        if fd >= 0:
            return fd
        code = ctypes.get_errno()
        if code == errno.ENOSYS:
            self.usable = False
        if code in _OPENAT2_MISSING or code in (errno.EXDEV, errno.ELOOP, errno.EAGAIN):
            # EXDEV: escapes or is an absolute symlink; ELOOP: a magic link or
            # too many symlinks; EAGAIN: a rename raced a "..". EPERM and
            # EINVAL can also be genuine answers; the walk gives them again.
            return None
        raise OSError(code, os.strerror(code), path)


_openat2 = _Openat2()


def openat2_available() -> bool:
    """Whether openat2 works here, tried with a harmless call."""
    if not _openat2.usable:
        return False
    root = os.open("/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fd = _openat2(root, ".", _O_PATH | os.O_CLOEXEC, 0)
    except OSError:
        return True  # a real answer, so the call exists
    finally:
        os.close(root)
    if fd is None:
        return False
    os.close(fd)
    return True


USE_OPENAT2 = True
"""False forces the component walk (tests run both ways)."""


def kind_of(mode: int) -> str:
    """What a file of this st_mode is, for messages."""
    kinds = (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISREG, "a regular file"),
    )
    return next((name for test, name in kinds if test(mode)), "a special file")


def check_regular(fd: int, path: str, *, limit: int | None, writing: bool) -> os.stat_result:
    """The descriptor's status if it is a regular file the worker may use."""
    status = os.fstat(fd)
    if not stat.S_ISREG(status.st_mode):
        raise UnsafeFile(path, f"is not a regular file (it is {kind_of(status.st_mode)})")
    if limit is not None and status.st_size > limit:
        raise FileTooLarge(path, limit)
    if writing and status.st_nlink > 1:
        raise UnsafeFile(
            path, f"has {status.st_nlink} hard links; the editor only writes files with a single name"
        )
    return status


def read_all(fd: int, path: str, limit: int) -> bytes:
    """Everything from the start of the file, refusing more than `limit` bytes."""
    chunks: list[bytes] = []
    total = 0
    while True:
        chunk = os.pread(fd, min(1 << 20, limit + 1 - total), total)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        total += len(chunk)
        if total > limit:
            raise FileTooLarge(path, limit)


def replace_all(fd: int, data: bytes) -> None:
    """Make the file hold exactly `data`."""
    # Written in place rather than renamed over, so the file keeps its mode
    # and owner.
    os.ftruncate(fd, 0)
    written = 0
    while written < len(data):
        written += os.pwrite(fd, data[written:], written)


def open_child_dir(dir_fd: int, name: str) -> int:
    """A directory entry of `dir_fd`, opened for listing only if it is a real
    directory (never through a symlink)."""
    return os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | _COMMON, dir_fd=dir_fd)


class Beneath:
    """An open directory; every path given to its methods is relative to it
    and never leads out of it."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        """The directory's absolute path; absolute paths and symlinks under it count as inside."""
        self.fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        status = os.fstat(self.fd)
        owner = (status.st_uid, status.st_gid)
        worker = (os.geteuid(), os.getegid())
        self.owner = owner if worker[0] == 0 and owner != worker else None
        """Who gets what the worker creates: the directory's owner when root
        works in someone else's directory, else None (the worker keeps it)."""

    def close(self) -> None:
        os.close(self.fd)

    def __enter__(self) -> Beneath:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- paths ---------------------------------------------------------------

    def relative(self, path: str) -> str:
        """`path` (relative, or absolute under the directory) as a clean
        relative path: no empty or "." components, "" for the directory
        itself. ".." is kept; resolution decides where it leads."""
        if "\0" in path:
            raise ValueError("embedded null byte")
        inner = self._inner(path)
        if inner is None:
            raise OutsideRoot(path)
        return "/".join(inner)

    def _inner(self, path: str) -> list[str] | None:
        pure = PurePosixPath(path)
        if not pure.is_absolute():
            return list(pure.parts)
        root = self.path.parts
        return list(pure.parts[len(root) :]) if pure.parts[: len(root)] == root else None

    # --- opening -------------------------------------------------------------

    def open(self, relative: str, flags: int, mode: int = 0o666, *, follow: bool = True) -> int:
        """Open `relative` with `flags` (plus O_NONBLOCK, O_NOCTTY, O_CLOEXEC)
        without leaving the directory. follow=False: a symlink as the last
        component is not followed (O_NOFOLLOW). Raises OutsideRoot or OSError."""
        if flags & _O_PATH:
            flags &= _O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW
            flags |= os.O_CLOEXEC
        else:
            flags |= _COMMON
        if not follow:
            flags |= os.O_NOFOLLOW
        if not flags & os.O_CREAT:
            mode = 0
        if USE_OPENAT2:
            fd = _openat2(self.fd, relative or ".", flags, mode)
            if fd is not None:
                return fd
        return self._walk(relative, flags, mode, follow)

    def _walk(self, relative: str, flags: int, mode: int, follow: bool) -> int:
        todo = [part for part in reversed(relative.split("/")) if part not in ("", ".")]
        held: list[int] = []  # descriptors of the directories entered, innermost last
        links = 0
        try:
            while todo:
                name = todo.pop()
                here = held[-1] if held else self.fd
                if name == "..":
                    if not held:
                        raise OutsideRoot(relative)
                    os.close(held.pop())
                    continue
                last = not todo
                try:
                    if not last:
                        held.append(os.open(name, _WALK_DIR, dir_fd=here))
                        continue
                    fd = os.open(name, flags | os.O_NOFOLLOW, mode, dir_fd=here)
                    if not (follow and flags & _O_PATH and stat.S_ISLNK(os.fstat(fd).st_mode)):
                        return fd
                    os.close(fd)  # O_PATH opened the symlink itself; follow it below
                except OSError as error:
                    # O_NOFOLLOW meets a symlink as ELOOP, or ENOTDIR with O_DIRECTORY.
                    if error.errno not in (errno.ELOOP, errno.ENOTDIR) or (last and not follow):
                        raise
                    target = _link_target(name, here, error)
                else:
                    target = os.readlink(name, dir_fd=here)
                links += 1
                if links > MAX_SYMLINKS:
                    raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), relative)
                if target.startswith("/"):
                    inner = self._inner(target)
                    if inner is None:
                        raise OutsideRoot(relative)
                    while held:
                        os.close(held.pop())
                else:
                    inner = target.split("/")
                todo.extend(part for part in reversed(inner) if part not in ("", "."))
            return os.open(".", flags, mode, dir_fd=held[-1] if held else self.fd)
        finally:
            for fd in held:
                os.close(fd)

    # --- files ---------------------------------------------------------------

    def open_file(
        self, relative: str, *, writing: bool, limit: int | None = MAX_FILE_BYTES, directory_ok: bool = False
    ) -> int:
        """A descriptor of the regular file `relative` (symlinks inside
        followed), O_RDWR when writing. Raises UnsafeFile for anything else,
        including a file over `limit` bytes (None: any size), and
        FileNotFoundError if it does not exist. directory_ok: a directory is
        opened too (read-only, for listing)."""
        try:
            fd = self.open(relative, os.O_RDWR if writing else os.O_RDONLY)
        except FileNotFoundError:
            raise
        except OSError as error:
            # e.g. EISDIR, or ENXIO for a socket: name what is there instead.
            self._refuse_special(relative, error)
            raise
        try:
            if not (directory_ok and not writing and stat.S_ISDIR(os.fstat(fd).st_mode)):
                check_regular(fd, relative, limit=limit, writing=writing)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _refuse_special(self, relative: str, error: OSError) -> None:
        try:
            fd = self.open(relative, _O_PATH or os.O_RDONLY)
        except OSError:
            return
        try:
            mode = os.fstat(fd).st_mode
        finally:
            os.close(fd)
        if not stat.S_ISREG(mode):
            raise UnsafeFile(relative, f"is not a regular file (it is {kind_of(mode)})") from error

    def read_file(self, relative: str, limit: int = MAX_FILE_BYTES) -> bytes:
        fd = self.open_file(relative, writing=False, limit=limit)
        try:
            return read_all(fd, relative, limit)
        finally:
            os.close(fd)

    def write_file(self, relative: str, data: bytes) -> None:
        """Replace the content of an existing regular file, or create it."""
        try:
            fd = self.open_file(relative, writing=True, limit=None)  # its old content is not read
        except FileNotFoundError:
            self.create_file(relative, data)
            return
        try:
            replace_all(fd, data)
        finally:
            os.close(fd)

    def exists(self, relative: str) -> bool:
        """Whether there is an entry at `relative`; a symlink counts as one,
        wherever it points."""
        try:
            os.close(self.open(relative, _O_PATH or os.O_RDONLY, follow=False))
        except FileNotFoundError:
            return False
        except OSError as error:
            if error.errno != errno.ELOOP:  # without O_PATH, ELOOP means a symlink
                raise
        return True

    def create_file(self, relative: str, data: bytes) -> None:
        """Create the regular file `relative`, and missing directories above
        it. Raises FileExistsError if anything is already there."""
        parent, _, name = relative.rpartition("/")
        if name in ("", ".", ".."):
            raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), relative)
        dir_fd = self.make_dirs(parent)
        try:
            fd = os.open(
                name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | _COMMON, 0o600, dir_fd=dir_fd
            )
        finally:
            os.close(dir_fd)
        try:
            self._give_away(fd)
            replace_all(fd, data)
        finally:
            os.close(fd)

    def remove_file(self, relative: str) -> None:
        """Delete the regular file `relative` (not a symlink to one). Nothing
        happens if it does not exist."""
        parent, _, name = relative.rpartition("/")
        if name in ("", ".", ".."):
            raise UnsafeFile(relative, "is not a regular file (it is a directory)")
        try:
            dir_fd = self.open_dir(parent)
        except FileNotFoundError:
            return
        try:
            try:
                mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
            except FileNotFoundError:
                return
            if not stat.S_ISREG(mode):
                raise UnsafeFile(relative, f"is not a regular file (it is {kind_of(mode)})")
            os.unlink(name, dir_fd=dir_fd)
        finally:
            os.close(dir_fd)

    # --- directories ---------------------------------------------------------

    def open_dir(self, relative: str) -> int:
        return self.open(relative, os.O_RDONLY | os.O_DIRECTORY)

    def make_dirs(self, relative: str) -> int:
        """A descriptor of directory `relative`, created with its missing
        parents (existing symlinks inside the directory are followed)."""
        try:
            return self.open_dir(relative)
        except FileNotFoundError:
            pass
        parts = relative.split("/")
        fd = self.open_dir("")
        try:
            for depth, name in enumerate(parts, start=1):
                try:
                    inner = self.open_dir("/".join(parts[:depth]))
                except FileNotFoundError:
                    try:
                        os.mkdir(name, 0o700, dir_fd=fd)
                        created = True
                    except FileExistsError:  # something appeared meanwhile
                        created = False
                    inner = open_child_dir(fd, name)
                    if created:
                        self._give_away(inner)
                os.close(fd)
                fd = inner
            return fd
        except BaseException:
            os.close(fd)
            raise

    def _give_away(self, fd: int) -> None:
        if self.owner is not None:
            os.fchown(fd, *self.owner)


def _link_target(name: str, dir_fd: int, error: OSError) -> str:
    """The target of symlink `name`; re-raises `error` if it is not a symlink."""
    try:
        return os.readlink(name, dir_fd=dir_fd)
    except OSError:
        raise error from None


def _size(limit: int) -> str:
    mib = limit / (1024 * 1024)
    return f"{mib:g} MiB" if mib >= 1 else f"{limit} bytes"
