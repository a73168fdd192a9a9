"""activities.safe_files: resolution beneath a directory, special files, links,
sizes and ownership, with openat2 and with the component walk."""

from __future__ import annotations

import errno
import os
import stat
import time
from pathlib import Path

import pytest

from activities import safe_files
from activities.safe_files import Beneath, OutsideRoot, UnsafeFile


@pytest.fixture(params=["openat2", "walk"])
def method(request, monkeypatch) -> str:
    if request.param == "openat2" and not safe_files.openat2_available():
        pytest.skip("openat2 is not available here")
    monkeypatch.setattr(safe_files, "USE_OPENAT2", request.param == "openat2")
    return request.param


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    directory = tmp_path / "outside"
    directory.mkdir()
    (directory / "secret.txt").write_text("secret")
    return directory


@pytest.fixture
def root(tmp_path: Path, outside: Path, method: str):
    """A directory with every kind of entry a hostile tool could leave."""
    top = tmp_path / "root"
    (top / "sub").mkdir(parents=True)
    (top / "sub" / "f.txt").write_text("f")
    (top / "rel").symlink_to("sub/f.txt")
    (top / "abs").symlink_to(top / "sub" / "f.txt")
    (top / "sublink").symlink_to("sub")
    (top / "sub" / "up").symlink_to("../sub/f.txt")
    (top / "sub" / "deep").symlink_to("../../outside")
    (top / "dangling").symlink_to("missing")
    (top / "loop1").symlink_to("loop2")
    (top / "loop2").symlink_to("loop1")
    (top / "out_abs").symlink_to(outside / "secret.txt")
    (top / "out_rel").symlink_to("../outside/secret.txt")
    (top / "outdir").symlink_to(outside)
    (top / "out_new").symlink_to(outside / "new.txt")
    os.mkfifo(top / "fifo")
    with Beneath(top) as beneath:
        yield beneath


def outcome(action) -> object:
    try:
        return action()
    except UnsafeFile as refusal:
        return (type(refusal).__name__, refusal.problem)
    except OSError as error:
        return errno.errorcode[error.errno]


FIFO = ("UnsafeFile", "is not a regular file (it is a FIFO)")
DIRECTORY = ("UnsafeFile", "is not a regular file (it is a directory)")
OUTSIDE = ("OutsideRoot", "leads outside the directory")

READS = {
    "sub/f.txt": b"f",
    "rel": b"f",
    "abs": b"f",
    "sublink/f.txt": b"f",
    "sub/up": b"f",
    "sub/../rel": b"f",
    "dangling": "ENOENT",
    "nope/x": "ENOENT",
    "sub/f.txt/x": "ENOTDIR",
    "loop1": "ELOOP",
    "fifo": FIFO,
    "sub": DIRECTORY,
    "": DIRECTORY,
    "out_abs": OUTSIDE,
    "out_rel": OUTSIDE,
    "outdir/secret.txt": OUTSIDE,
    "../outside/secret.txt": OUTSIDE,
    "sub/../../outside/secret.txt": OUTSIDE,
    "sub/deep/secret.txt": OUTSIDE,
}


@pytest.mark.timeout(20)
def test_reads_resolve_inside_and_refuse_the_rest(root: Beneath) -> None:
    found = {path: outcome(lambda: root.read_file(path)) for path in READS}
    assert found == READS


@pytest.mark.timeout(20)
def test_nothing_outside_is_written_or_removed(root: Beneath, outside: Path) -> None:
    symlink = ("UnsafeFile", "is not a regular file (it is a symbolic link)")
    removals = {"out_abs": symlink, "out_rel": symlink, "outdir/secret.txt": OUTSIDE}
    removals |= {"sub/deep/secret.txt": OUTSIDE, "../outside/secret.txt": OUTSIDE}
    for path, refusal in removals.items():
        assert outcome(lambda: root.write_file(path, b"changed")) == OUTSIDE, path
        assert outcome(lambda: root.remove_file(path)) == refusal, path
    for path in ("outdir/new.txt", "sub/deep/new.txt", "../outside/new.txt", "outdir/a/b.txt"):
        assert outcome(lambda: root.create_file(path, b"x")) == OUTSIDE, path
    # A symlink as the last component is never created through.
    assert outcome(lambda: root.create_file("out_new", b"x")) == "EEXIST"
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert (outside / "secret.txt").read_text() == "secret"


@pytest.mark.timeout(20)
def test_a_fifo_never_blocks(root: Beneath) -> None:
    started = time.monotonic()
    assert outcome(lambda: root.read_file("fifo")) == FIFO
    assert outcome(lambda: root.open_file("fifo", writing=True)) == FIFO
    assert outcome(lambda: root.write_file("fifo", b"x")) == FIFO
    assert outcome(lambda: root.remove_file("fifo")) == FIFO
    assert outcome(lambda: root.create_file("fifo", b"x")) == "EEXIST"
    assert time.monotonic() - started < 2
    assert stat.S_ISFIFO(os.lstat(root.path / "fifo").st_mode)


def test_a_device_is_refused(root: Beneath) -> None:
    try:
        os.mknod(root.path / "zero", 0o666 | stat.S_IFCHR, os.makedev(1, 5))
    except PermissionError:
        pytest.skip("creating a device node needs CAP_MKNOD")
    (root.path / "dev_zero").symlink_to("/dev/zero")
    device = ("UnsafeFile", "is not a regular file (it is a character device)")
    assert outcome(lambda: root.read_file("zero")) == device
    assert outcome(lambda: root.write_file("zero", b"x")) == device
    assert outcome(lambda: root.read_file("dev_zero")) == OUTSIDE


def test_a_hard_link_is_read_but_never_written(root: Beneath, outside: Path) -> None:
    os.link(outside / "secret.txt", root.path / "linked")
    linked = ("UnsafeFile", "has 2 hard links; the editor only writes files with a single name")
    assert root.read_file("linked") == b"secret"
    assert outcome(lambda: root.open_file("linked", writing=True)) == linked
    assert outcome(lambda: root.write_file("linked", b"changed")) == linked
    assert (outside / "secret.txt").read_text() == "secret"


def test_sizes_are_checked_on_the_descriptor_and_while_reading(root: Beneath) -> None:
    (root.path / "five").write_bytes(b"12345")
    assert outcome(lambda: root.read_file("five", limit=4)) == ("FileTooLarge", "is larger than 4 bytes")
    assert root.read_file("five", limit=5) == b"12345"
    # A file that grows after the size check: the read itself stops at the limit.
    fd = root.open_file("five", writing=False)
    try:
        (root.path / "five").write_bytes(b"123456789")
        assert outcome(lambda: safe_files.read_all(fd, "five", 5)) == ("FileTooLarge", "is larger than 5 bytes")
    finally:
        os.close(fd)
    with open(root.path / "huge", "wb") as file:
        file.truncate(safe_files.MAX_FILE_BYTES + 1)  # sparse
    assert outcome(lambda: root.read_file("huge")) == ("FileTooLarge", "is larger than 10 MiB")


def test_create_file_makes_its_parents(root: Beneath) -> None:
    root.create_file("a/b/c.txt", b"c")
    assert (root.path / "a" / "b" / "c.txt").read_bytes() == b"c"
    root.create_file("sublink/new.txt", b"n")  # a symlinked directory that stays inside
    assert (root.path / "sub" / "new.txt").read_bytes() == b"n"
    assert outcome(lambda: root.create_file("a/b/c.txt", b"again")) == "EEXIST"
    assert outcome(lambda: root.create_file("sub/f.txt/x", b"x")) == "ENOTDIR"


def test_write_file_replaces_content_through_inside_symlinks(root: Beneath) -> None:
    root.write_file("rel", b"longer content")
    root.write_file("abs", b"short")
    assert (root.path / "sub" / "f.txt").read_bytes() == b"short"
    assert (root.path / "rel").is_symlink() and (root.path / "abs").is_symlink()
    root.write_file("fresh/file.txt", b"new")
    assert (root.path / "fresh" / "file.txt").read_bytes() == b"new"


def test_remove_file(root: Beneath) -> None:
    root.remove_file("sub/f.txt")
    assert not (root.path / "sub" / "f.txt").exists()
    root.remove_file("sub/f.txt")  # already gone
    root.remove_file("nope/f.txt")
    symlink = ("UnsafeFile", "is not a regular file (it is a symbolic link)")
    assert outcome(lambda: root.remove_file("sublink")) == symlink
    assert outcome(lambda: root.remove_file("sub")) == DIRECTORY
    assert (root.path / "sublink").is_symlink()


def test_exists_counts_symlinks_wherever_they_point(root: Beneath) -> None:
    for path in ("sub/f.txt", "dangling", "out_abs", "fifo", "sub", "loop1"):
        assert root.exists(path), path
    assert not root.exists("nope")
    assert outcome(lambda: root.exists("outdir/secret.txt")) == OUTSIDE


def test_symlink_hops_are_limited(root: Beneath) -> None:
    for number in range(safe_files.MAX_SYMLINKS + 1):
        (root.path / f"hop{number}").symlink_to(f"hop{number + 1}")
    (root.path / f"hop{safe_files.MAX_SYMLINKS + 1}").write_text("end")
    assert outcome(lambda: root.read_file("hop0")) == "ELOOP"
    assert root.read_file("hop1") == b"end"


def test_open_child_dir_only_opens_real_directories(root: Beneath) -> None:
    os.close(safe_files.open_child_dir(root.fd, "sub"))
    for name in ("sublink", "outdir", "fifo", "rel"):
        with pytest.raises(OSError):
            safe_files.open_child_dir(root.fd, name)


def test_relative_paths(root: Beneath) -> None:
    assert root.relative("a//b/./c/") == "a/b/c"
    assert root.relative(str(root.path / "x" / "y")) == "x/y"
    assert root.relative(str(root.path)) == ""
    assert root.relative(".") == ""
    with pytest.raises(OutsideRoot):
        root.relative("/etc/passwd")
    with pytest.raises(OutsideRoot):
        root.relative(str(root.path) + "2/x")
    with pytest.raises(ValueError):
        root.relative("a\0b")


def test_created_entries_get_the_directory_owner(tmp_path: Path, method: str) -> None:
    if os.geteuid() != 0:
        pytest.skip("only a root worker hands files over")
    top = tmp_path / "tools_dir"
    top.mkdir()
    os.chown(top, 65534, 65534)
    with Beneath(top) as beneath:
        assert beneath.owner == (65534, 65534)
        beneath.create_file("x/y/z.txt", b"z")
        beneath.make_dirs("d/e")
    for path in ("x", "x/y", "x/y/z.txt", "d", "d/e"):
        status = (top / path).stat()
        assert (status.st_uid, status.st_gid) == (65534, 65534), path
    own = tmp_path / "own_dir"
    own.mkdir()
    with Beneath(own) as beneath:
        assert beneath.owner is None
        beneath.create_file("f", b"f")
    assert (own / "f").stat().st_uid == 0


def test_without_openat2_the_walk_answers(root: Beneath, monkeypatch) -> None:
    # A system call number the kernel does not have fails with ENOSYS, as
    # openat2 does on old kernels.
    monkeypatch.setattr(safe_files, "_OPENAT2_NUMBER", 1_000_000)
    missing = safe_files._Openat2()
    monkeypatch.setattr(safe_files, "_openat2", missing)
    monkeypatch.setattr(safe_files, "USE_OPENAT2", True)
    assert root.read_file("abs") == b"f"
    assert not missing.usable and not safe_files.openat2_available()
    assert outcome(lambda: root.read_file("out_rel")) == OUTSIDE
