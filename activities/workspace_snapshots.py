"""Per-step snapshots of run directories, and restoring one (forks, rewinds).

Layout, in the workspace root's private area (next to `.history`; no run
directory can be or contain it, and the tool sandbox binds only the run's
directory):

    <root>/.snapshots/<dir>/blobs/<sha256>              file contents, 0400
    <root>/.snapshots/<dir>/runs/<workflow>/step-<N>.json  the manifest of step N
    <root>/.snapshots/<dir>/latest.json                 the newest manifest of <dir>

A manifest maps each path of the directory to what it was: a directory, a
symbolic link (its target, recorded, never followed) or a regular file (mode,
size, times, inode, and the blob of its content). A snapshot re-reads only
files whose size, mtime, ctime or inode differ from the newest manifest of
the directory; it copies them (never hard-links: code in the run directory
could write through a link into the blob). FIFOs, sockets and devices are
skipped and listed in the manifest, as is a file that does not fit the
directory's snapshot budget (its blobs together hold at most the run's disk
quota, separate from the quota itself) or that would bring the disk below
its reserve. Flow steps share their flow's directory, hence the workflow id
in the manifest's path.

Restoring makes a directory match a manifest without following any link in
it: what the manifest lacks is removed, directories are made, files written
from their blobs, links created; a link that then resolves outside the
directory is removed again and said. Directory timestamps, owners other
than the tool user and set-id bits are not restored.

Pure file logic, no Temporal: the activities are in activities/snapshot_activities.py.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shutil
import stat
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from activities.tools import disk_use
from activities.workspace import Workspace, checked_name
from agent_model.payload import clip
from agent_model.workspace_names import workspace_name_for

SNAPSHOTS_DIR_NAME = ".snapshots"
MANIFEST_VERSION = 1
CHUNK = 1024 * 1024
SKIPPED_KEPT = 200
"""Skipped paths a manifest or a restore lists (the rest are counted)."""
SKIPPED_PATH_CHARS = 300
"""Characters of a skipped path kept: the run's code names its paths, up to 4 KiB each."""
MAX_ENTRIES = 20_000
"""Entries one manifest records: the run's code decides how many files there
are, and each snapshot walks them all and writes a manifest of them."""

DIR, FILE, LINK = "dir", "file", "link"
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_STEP_PREFIX, _STEP_SUFFIX = "step-", ".json"


@dataclass(frozen=True)
class Entry:
    """One path of a snapshot."""

    kind: str
    mode: int = 0
    size: int = 0
    mtime_ns: int = 0
    ctime_ns: int = 0
    inode: int = 0
    blob: str = ""
    """A file's content digest; a link's target."""

    def same_file(self, status: os.stat_result) -> bool:
        """Whether a file with this status can only be the one recorded."""
        return (self.kind, self.size, self.mtime_ns, self.ctime_ns, self.inode) == (
            FILE, status.st_size, status.st_mtime_ns, status.st_ctime_ns, status.st_ino,
        )


class _Skips:
    skipped: list[str]
    skipped_count: int

    def skip(self, path: str, why: str) -> None:
        """Note what was not recorded or restored: listed up to SKIPPED_KEPT, counted all."""
        self.skipped_count += 1
        if len(self.skipped) < SKIPPED_KEPT:
            self.skipped.append(f"{clip(path, SKIPPED_PATH_CHARS)}: {why}")


@dataclass
class Manifest(_Skips):
    workflow_id: str
    step: int
    entries: dict[str, Entry] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    """`path: why`, for what was not recorded (at most SKIPPED_KEPT)."""
    skipped_count: int = 0


    def to_json(self) -> str:
        return json.dumps(
            {
                "version": MANIFEST_VERSION,
                "workflow_id": self.workflow_id,
                "step": self.step,
                "entries": [[path, *_fields(e)] for path, e in self.entries.items()],
                "skipped": self.skipped,
                "skipped_count": self.skipped_count,
            }
        )

    @classmethod
    def from_json(cls, text: str) -> Manifest:
        data = json.loads(text)
        entries = {row[0]: Entry(*row[1:]) for row in data["entries"]}
        return cls(data["workflow_id"], data["step"], entries, data["skipped"], data["skipped_count"])


def _fields(entry: Entry) -> list:
    return [entry.kind, entry.mode, entry.size, entry.mtime_ns, entry.ctime_ns, entry.inode, entry.blob]


@dataclass
class Restored(_Skips):
    """What a restore did."""

    directory: Path
    snapshot_step: int | None
    restored: int = 0
    skipped: list[str] = field(default_factory=list)
    skipped_count: int = 0



class SnapshotStore:
    """The snapshots of the run directories under one workspace root."""

    def __init__(self, workspace: Workspace, budget_bytes: int | None = None) -> None:
        """budget_bytes: what one directory's blobs may hold (default: the run's disk quota)."""
        self.workspace = workspace
        self.budget_bytes = workspace.run_disk_bytes if budget_bytes is None else budget_bytes

    # ---- where things are --------------------------------------------------------

    def store_dir(self, name: str) -> Path:
        top = self.workspace.root / SNAPSHOTS_DIR_NAME
        top.mkdir(exist_ok=True, mode=0o700)
        directory = top / checked_name(name)
        (directory / "blobs").mkdir(parents=True, exist_ok=True, mode=0o700)
        return directory

    def runs_dir(self, name: str, workflow_id: str) -> Path:
        directory = self.store_dir(name) / "runs" / workspace_name_for(workflow_id)
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        return directory

    def steps(self, name: str, workflow_id: str) -> list[int]:
        """The steps of the run that have a manifest, in order."""
        found = []
        for file in os.listdir(self.runs_dir(name, workflow_id)):
            number = file.removeprefix(_STEP_PREFIX).removesuffix(_STEP_SUFFIX)
            if file.startswith(_STEP_PREFIX) and file.endswith(_STEP_SUFFIX) and number.isdigit():
                found.append(int(number))
        return sorted(found)

    def manifest_at(self, name: str, workflow_id: str, step: int, earlier_than: float | None = None) -> Manifest | None:
        """The newest manifest of the run at or before `step`; if it has none,
        and `earlier_than` is given, the newest of the directory's written
        before that time (POSIX seconds)."""
        earlier = [s for s in self.steps(name, workflow_id) if s <= step]
        if earlier:
            path = self.runs_dir(name, workflow_id) / f"{_STEP_PREFIX}{earlier[-1]}{_STEP_SUFFIX}"
            return Manifest.from_json(path.read_text(encoding="utf-8"))
        if earlier_than is None:
            return None
        written = [
            (status.st_mtime, path)
            for path in (self.store_dir(name) / "runs").glob(f"*/{_STEP_PREFIX}*{_STEP_SUFFIX}")
            if (status := path.stat()).st_mtime < earlier_than
        ]
        return Manifest.from_json(max(written)[1].read_text(encoding="utf-8")) if written else None

    def drop_after(self, name: str, workflow_id: str, step: int) -> None:
        """Forget the run's manifests of steps after `step` (a rewound run's abandoned future)."""
        runs = self.runs_dir(name, workflow_id)
        for later in (s for s in self.steps(name, workflow_id) if s > step):
            (runs / f"{_STEP_PREFIX}{later}{_STEP_SUFFIX}").unlink(missing_ok=True)

    def _latest(self, name: str) -> Manifest | None:
        try:
            return Manifest.from_json((self.store_dir(name) / "latest.json").read_text(encoding="utf-8"))
        except (OSError, ValueError, KeyError, TypeError):
            return None  # none yet, or torn: every file is then read again

    # ---- taking one ------------------------------------------------------------------

    def snapshot(self, name: str, workflow_id: str, step: int) -> Manifest:
        """Record run directory `name` as it is now, as `step` of `workflow_id`."""
        store = self.store_dir(name)
        run_dir = self.workspace.run_dir(name)
        previous = self._latest(name)
        taking = _Taking(store / "blobs", self.budget_bytes, self.workspace.reserve, previous)
        manifest = Manifest(workflow_id, step)
        top = os.open(run_dir, _DIR_FLAGS)
        try:
            taking.walk(top, "", manifest)
        finally:
            os.close(top)
        text = manifest.to_json()
        _write_private(self.runs_dir(name, workflow_id) / f"{_STEP_PREFIX}{step}{_STEP_SUFFIX}", text)
        _write_private(store / "latest.json", text)
        return manifest

    def blob_bytes(self, name: str) -> int:
        return _blobs_held(self.store_dir(name) / "blobs")

    # ---- restoring one ---------------------------------------------------------------

    def restore(
        self, origin: str, workflow_id: str, step: int, into: str, earlier_than: float | None = None
    ) -> Restored:
        """Make run directory `into` hold what `origin` held at the end of
        `step` of `workflow_id` (the newest manifest at or before it, see
        manifest_at; none: nothing)."""
        manifest = self.manifest_at(origin, workflow_id, step, earlier_than)
        run_dir = self.workspace.run_dir(into)
        done = Restored(run_dir, manifest.step if manifest else None)
        wanted = manifest.entries if manifest else {}
        blobs = self.store_dir(origin) / "blobs"
        top = os.open(run_dir, _DIR_FLAGS)
        try:
            _prune(top, "", wanted)
            putting = _Putting(top, blobs, self.workspace.tool_owner, done, self.workspace.reserve())
            for path in sorted(wanted, key=lambda p: p.split("/")):
                putting.put(path, wanted[path])
            putting.close()
            for path in (p for p, e in wanted.items() if e.kind == LINK):
                _drop_if_outside(top, run_dir, path, done)
            for path in [p for p, e in wanted.items() if e.kind == DIR][::-1]:
                _chmod_dir(top, path, wanted[path].mode)
        finally:
            os.close(top)
        if manifest is not None:  # what the snapshot itself could not record
            done.skipped = (manifest.skipped + done.skipped)[:SKIPPED_KEPT]
            done.skipped_count += manifest.skipped_count
        return done


# ---- taking: the walk -------------------------------------------------------------------


class _Taking:
    def __init__(self, blobs: Path, budget: int, reserve: Callable[[], int], previous: Manifest | None) -> None:
        self.blobs, self.budget, self.reserve = blobs, budget, reserve
        self.previous = previous.entries if previous else {}
        self._held: int | None = None

    def walk(self, fd: int, prefix: str, manifest: Manifest) -> None:
        """Record the entries of directory `fd` (path `prefix`), depth first, one descriptor per level."""
        with os.scandir(fd) as listing:
            names = sorted(entry.name for entry in listing)
        for entry_name in names:
            path = prefix + entry_name
            if len(manifest.entries) >= MAX_ENTRIES:
                manifest.skip(path, f"past the {MAX_ENTRIES} entries a snapshot records")
                continue
            try:
                status = os.stat(entry_name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                continue  # removed since it was listed
            mode = status.st_mode
            if stat.S_ISDIR(mode):
                manifest.entries[path] = Entry(DIR, stat.S_IMODE(mode))
                try:
                    child = os.open(entry_name, _DIR_FLAGS, dir_fd=fd)
                except OSError as e:
                    manifest.skip(path + "/", f"cannot be read ({e.strerror})")
                    continue
                try:
                    self.walk(child, path + "/", manifest)
                except RecursionError:
                    manifest.skip(path + "/", "nested too deep to snapshot")
                finally:
                    os.close(child)
            elif stat.S_ISLNK(mode):
                target = os.readlink(entry_name, dir_fd=fd)
                manifest.entries[path] = Entry(LINK, blob=target)
            elif stat.S_ISREG(mode):
                self._file(fd, entry_name, path, status, manifest)
            else:
                manifest.skip(path, "not a regular file, directory or symbolic link (a FIFO, socket or device)")

    def _file(self, fd: int, entry_name: str, path: str, status: os.stat_result, manifest: Manifest) -> None:
        known = self.previous.get(path)
        if known is not None and known.same_file(status) and (self.blobs / known.blob).exists():
            manifest.entries[path] = known
            return
        size = status.st_size
        why = self._refusal(size)
        if why is not None:
            manifest.skip(path, why)
            return
        try:
            digest, copied = self._copy(fd, entry_name, status)
        except OSError as e:
            manifest.skip(path, f"cannot be read ({e.strerror or e})")
            return
        except _TooBig as e:
            manifest.skip(path, str(e))
            return
        self._held = (self._held or 0) + copied
        manifest.entries[path] = Entry(
            FILE, stat.S_IMODE(status.st_mode), status.st_size, status.st_mtime_ns, status.st_ctime_ns,
            status.st_ino, digest,
        )

    def _refusal(self, size: int) -> str | None:
        if size > self.budget:
            return f"{size} bytes, more than the snapshot budget of {self.budget / disk_use.MiB:g} MiB"
        if self._held is None:
            self._held = _blobs_held(self.blobs)
        if self._held + size > self.budget:
            return f"{size} bytes, over what is left of the snapshot budget of {self.budget / disk_use.MiB:g} MiB"
        reserve = self.reserve()
        if disk_use.free_bytes(self.blobs) - size < reserve:
            return f"not recorded: the disk is nearly full (less than {reserve / disk_use.MiB:g} MiB free)"
        return None

    def _copy(self, fd: int, entry_name: str, status: os.stat_result) -> tuple[str, int]:
        """Copy the file into a blob; (its digest, bytes newly stored)."""
        source = os.open(entry_name, _READ_FLAGS, dir_fd=fd)
        temporary = self.blobs / f"tmp-{uuid.uuid4().hex}"
        try:
            opened = os.fstat(source)
            if not stat.S_ISREG(opened.st_mode) or opened.st_ino != status.st_ino:
                raise OSError(errno.ESTALE, "it changed while it was read")
            digest = hashlib.sha256()
            limit = self.budget - (self._held or 0)
            written = 0
            with open(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600), "wb") as out:
                while chunk := os.read(source, CHUNK):
                    written += len(chunk)
                    if written > limit:
                        raise _TooBig("grew past what is left of the snapshot budget while it was read")
                    digest.update(chunk)
                    out.write(chunk)
            blob = self.blobs / digest.hexdigest()
            if blob.exists():
                return digest.hexdigest(), 0
            os.chmod(temporary, 0o400)
            os.replace(temporary, blob)
            return digest.hexdigest(), written
        finally:
            os.close(source)
            temporary.unlink(missing_ok=True)


class _TooBig(Exception):
    pass


def _blobs_held(blobs: Path) -> int:
    held = 0
    with os.scandir(blobs) as listing:
        for entry in listing:
            try:
                held += entry.stat(follow_symlinks=False).st_size
            except FileNotFoundError:
                continue
    return held


def _write_private(path: Path, text: str) -> None:
    """Write `path` whole or not at all (0600)."""
    temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex}")
    with open(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600), "w", encoding="utf-8") as out:
        out.write(text)
    os.replace(temporary, path)


# ---- restoring: removing, putting back ---------------------------------------------------


def _kind(mode: int) -> str | None:
    if stat.S_ISDIR(mode):
        return DIR
    if stat.S_ISLNK(mode):
        return LINK
    if stat.S_ISREG(mode):
        return FILE
    return None


def _prune(fd: int, prefix: str, wanted: dict[str, Entry]) -> None:
    """Remove from directory `fd` what the manifest does not have there as
    the same kind; links and files are always replaced (put writes them
    again), directories kept are visited."""
    with os.scandir(fd) as listing:
        names = [entry.name for entry in listing]
    for entry_name in names:
        path = prefix + entry_name
        try:
            status = os.stat(entry_name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            continue
        entry = wanted.get(path)
        if stat.S_ISDIR(status.st_mode):
            if entry is not None and entry.kind == DIR:
                _open_up(fd, entry_name)
                child = os.open(entry_name, _DIR_FLAGS, dir_fd=fd)
                try:
                    _prune(child, path + "/", wanted)
                finally:
                    os.close(child)
            else:
                _make_removable(fd, entry_name)
                shutil.rmtree(entry_name, dir_fd=fd)
        else:
            os.unlink(entry_name, dir_fd=fd)


def _open_up(fd: int, entry_name: str) -> None:
    """chmod 0700 the directory `entry_name` of `fd`, which must be one: a link
    swapped in since it was looked at fails (ENOTDIR) instead of being followed.
    O_PATH needs no permission on the directory, which may be closed (chmod 0)."""
    held = os.open(entry_name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
    try:
        os.chmod(f"/proc/self/fd/{held}", 0o700)
    finally:
        os.close(held)


def _make_removable(fd: int, entry_name: str) -> None:
    """Open up a directory tree the agent may have closed (chmod 0), never following links."""
    _open_up(fd, entry_name)
    child = os.open(entry_name, _DIR_FLAGS, dir_fd=fd)
    try:
        with os.scandir(child) as listing:
            subdirs = [e.name for e in listing if e.is_dir(follow_symlinks=False)]
        for name in subdirs:
            _make_removable(child, name)
    finally:
        os.close(child)


class _Putting:
    """Writes entries in depth-first order, holding a descriptor for each
    directory on the way down to the current one (never following a link)."""

    def __init__(self, top: int, blobs: Path, owner: tuple[int, int] | None, done: Restored, reserve: int) -> None:
        self.blobs, self.owner, self.done, self.reserve = blobs, owner, done, reserve
        self.chain: list[tuple[str, int]] = [("", top)]
        """(directory path, its descriptor), from the top; the top is the caller's."""

    def close(self) -> None:
        while len(self.chain) > 1:
            os.close(self.chain.pop()[1])

    def _parent(self, path: str) -> int | None:
        parent = path.rpartition("/")[0]
        while len(self.chain) > 1 and not (parent == self.chain[-1][0] or parent.startswith(self.chain[-1][0] + "/")):
            os.close(self.chain.pop()[1])
        here = self.chain[-1][0]
        rest = parent[len(here) + 1 :] if here else parent
        for part in [p for p in rest.split("/") if p]:
            try:
                fd = os.open(part, _DIR_FLAGS, dir_fd=self.chain[-1][1])
            except OSError:
                return None  # its directory could not be made: skipped already
            here = f"{here}/{part}" if here else part
            self.chain.append((here, fd))
        return self.chain[-1][1]

    def put(self, path: str, entry: Entry) -> None:
        parent = self._parent(path)
        name = path.rpartition("/")[2]
        if parent is None:
            self.done.skip(path, "its directory could not be restored")
            return
        try:
            if entry.kind == DIR:
                try:
                    os.mkdir(name, 0o700, dir_fd=parent)
                except FileExistsError:
                    pass  # kept by the prune: a real directory
            elif entry.kind == LINK:
                os.symlink(entry.blob, name, dir_fd=parent)
            elif disk_use.free_bytes(parent) - entry.size < self.reserve:
                self.done.skip(path, f"not restored: the disk is nearly full (less than {self.reserve / disk_use.MiB:g} MiB free)")
                return
            else:
                self._file(parent, name, entry)
            if self.owner is not None:
                os.chown(name, *self.owner, dir_fd=parent, follow_symlinks=False)
        except OSError as e:
            self.done.skip(path, f"cannot be restored ({e.strerror or e})")
            return
        self.done.restored += 1

    def _file(self, parent: int, name: str, entry: Entry) -> None:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        with open(self.blobs / entry.blob, "rb") as source, open(os.open(name, flags, 0o600, dir_fd=parent), "wb") as out:
            shutil.copyfileobj(source, out, CHUNK)
            out.flush()
            os.fchmod(out.fileno(), entry.mode & 0o777)
            os.utime(out.fileno(), ns=(entry.mtime_ns, entry.mtime_ns))


@contextlib.contextmanager
def _parent_of(top: int, path: str) -> Iterator[tuple[int, str]]:
    """(a descriptor of `path`'s directory, reached from `top` one component at
    a time with no link followed, `path`'s last name)."""
    parts = path.split("/")
    fd, opened = top, []
    try:
        for part in parts[:-1]:
            fd = os.open(part, _DIR_FLAGS, dir_fd=fd)
            opened.append(fd)
        yield fd, parts[-1]
    finally:
        for held in opened:
            os.close(held)


def _chmod_dir(top: int, path: str, mode: int) -> None:
    """Give a restored directory its recorded mode (after its content is in)."""
    try:
        with _parent_of(top, path) as (parent, name):
            child = os.open(name, _DIR_FLAGS, dir_fd=parent)
            try:
                os.fchmod(child, mode & 0o777)
            finally:
                os.close(child)
    except OSError:
        pass  # not restored: said by put


def _drop_if_outside(top: int, run_dir: Path, path: str, done: Restored) -> None:
    """Remove a restored link that resolves outside the run directory. The
    decision reads the path; the removal goes through descriptors, so a
    directory swapped for a link meanwhile never leads it outside."""
    real = Path(os.path.realpath(run_dir / path))
    if real == run_dir or run_dir in real.parents:
        return
    try:
        with _parent_of(top, path) as (parent, name):
            target = os.readlink(name, dir_fd=parent)
            os.unlink(name, dir_fd=parent)
    except OSError:
        return  # not a link (any more), or gone
    done.restored -= 1
    done.skip(path, f"not restored: a symbolic link to {target!r}, outside the run directory")
