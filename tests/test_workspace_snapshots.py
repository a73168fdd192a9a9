"""Snapshots of run directories and restoring them (activities/workspace_snapshots.py),
on real files in a temporary workspace root."""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import pytest

from activities.workspace import Workspace
from activities import workspace_snapshots
from activities.workspace_snapshots import SnapshotStore

RUN = "run-a"
WORKFLOW = "run-a"


def make_store(tmp_path: Path, **options) -> tuple[SnapshotStore, Path]:
    workspace = Workspace(tmp_path / "ws", **options)
    return SnapshotStore(workspace), workspace.run_dir(RUN)


def tree(directory: Path) -> dict[str, str]:
    """Every path under `directory`: a file's text, a link's target, a directory's "/"."""
    found: dict[str, str] = {}
    for path in sorted(directory.rglob("*")):
        name = str(path.relative_to(directory))
        if path.is_symlink():
            found[name] = "-> " + os.readlink(path)
        elif path.is_dir():
            found[name] = "/"
        else:
            found[name] = path.read_text()
    return found


def test_a_restore_brings_back_the_files_of_a_step_in_a_new_directory(tmp_path):
    store, run_dir = make_store(tmp_path)
    (run_dir / "kept.txt").write_text("one")
    (run_dir / "changed.txt").write_text("before")
    (run_dir / "sub").mkdir()
    (run_dir / "sub" / "deleted.txt").write_text("here at step 1")
    os.symlink("kept.txt", run_dir / "link")
    store.snapshot(RUN, WORKFLOW, 1)
    at_step_1 = tree(run_dir)

    (run_dir / "changed.txt").write_text("after")
    (run_dir / "sub" / "deleted.txt").unlink()
    (run_dir / "created.txt").write_text("new at step 2")
    store.snapshot(RUN, WORKFLOW, 2)
    at_step_2 = tree(run_dir)

    done = store.restore(RUN, WORKFLOW, 1, "fork")
    assert tree(done.directory) == at_step_1
    assert done.snapshot_step == 1 and done.skipped_count == 0
    assert tree(run_dir) == at_step_2, "the origin's directory changed"
    # A step without a snapshot of its own is as the newest one before it.
    assert tree(store.restore(RUN, WORKFLOW, 5, "fork-later").directory) == at_step_2


def test_a_restore_in_place_removes_what_came_later_and_keeps_modes_and_times(tmp_path):
    store, run_dir = make_store(tmp_path)
    script = run_dir / "run.sh"
    script.write_text("echo hi")
    script.chmod(0o750)
    os.utime(script, ns=(1_000_000_000, 1_000_000_000))
    store.snapshot(RUN, WORKFLOW, 1)
    script.write_text("rm -rf /")
    (run_dir / "later").mkdir()
    (run_dir / "later" / "x").write_text("x")
    (run_dir / "later").chmod(0)  # the agent closed it

    store.restore(RUN, WORKFLOW, 1, RUN)
    assert tree(run_dir) == {"run.sh": "echo hi"}
    assert stat.S_IMODE(script.stat().st_mode) == 0o750
    assert script.stat().st_mtime_ns == 1_000_000_000


def test_no_snapshot_at_or_before_the_step_restores_an_empty_directory(tmp_path):
    store, run_dir = make_store(tmp_path)
    (run_dir / "a").write_text("a")
    store.snapshot(RUN, WORKFLOW, 3)
    done = store.restore(RUN, WORKFLOW, 2, "fork")
    assert done.snapshot_step is None and tree(done.directory) == {}


def test_unchanged_files_are_not_read_again_and_contents_are_stored_once(tmp_path):
    store, run_dir = make_store(tmp_path)
    for n in range(20):
        (run_dir / f"f{n}").write_text(f"content {n}")
    (run_dir / "copy").write_text("content 0")
    store.snapshot(RUN, WORKFLOW, 1)
    blobs = sorted(os.listdir(store.store_dir(RUN) / "blobs"))
    assert len(blobs) == 20, "equal contents share one blob"
    # A blob the snapshot would have to copy again is made unreadable: the next
    # snapshot must not touch it for an unchanged file.
    (run_dir / "f1").write_text("changed")
    second = store.snapshot(RUN, WORKFLOW, 2)
    assert len(os.listdir(store.store_dir(RUN) / "blobs")) == 21
    assert second.entries["f0"] == store.manifest_at(RUN, WORKFLOW, 1).entries["f0"]
    blob = store.store_dir(RUN) / "blobs" / second.entries["f0"].blob
    assert stat.S_IMODE(blob.stat().st_mode) == 0o400


def test_blobs_are_copies_not_links_of_the_run_files(tmp_path):
    store, run_dir = make_store(tmp_path)
    (run_dir / "data").write_text("original")
    store.snapshot(RUN, WORKFLOW, 1)
    with open(run_dir / "data", "r+") as changed_in_place:  # same inode, as code in the sandbox could
        changed_in_place.write("CORRUPTED")
    assert tree(store.restore(RUN, WORKFLOW, 1, "fork").directory) == {"data": "original"}


def test_symlinks_are_recorded_never_followed_and_never_restored_pointing_outside(tmp_path):
    store, run_dir = make_store(tmp_path)
    secret = tmp_path / "secret.txt"
    secret.write_text("operator secret")
    os.symlink(secret, run_dir / "absolute")
    os.symlink("../../secret.txt", run_dir / "relative-out")
    os.symlink(".", run_dir / "here")
    os.symlink("here/..", run_dir / "escape-through-links")
    (run_dir / "inside.txt").write_text("in")
    os.symlink("inside.txt", run_dir / "fine")
    os.symlink(str(tmp_path), run_dir / "dir-link")
    manifest = store.snapshot(RUN, WORKFLOW, 1)
    assert manifest.entries["absolute"].blob == str(secret)
    assert not any("secret" in path for path in manifest.entries if path != "absolute"), "a link was followed"

    done = store.restore(RUN, WORKFLOW, 1, "fork")
    assert tree(done.directory) == {"fine": "-> inside.txt", "here": "-> .", "inside.txt": "in"}
    assert sorted(line.split(":")[0] for line in done.skipped) == [
        "absolute", "dir-link", "escape-through-links", "relative-out"
    ]
    assert secret.read_text() == "operator secret"


def test_a_restore_does_not_follow_a_link_that_stands_where_a_directory_was(tmp_path):
    store, run_dir = make_store(tmp_path)
    (run_dir / "sub").mkdir()
    (run_dir / "sub" / "f").write_text("restored")
    store.snapshot(RUN, WORKFLOW, 1)
    outside = tmp_path / "outside"
    outside.mkdir()
    (run_dir / "sub" / "f").unlink()
    (run_dir / "sub").rmdir()
    os.symlink(outside, run_dir / "sub")  # written after: a restore must not write through it
    store.restore(RUN, WORKFLOW, 1, RUN)
    assert list(outside.iterdir()) == []
    assert tree(run_dir) == {"sub": "/", "sub/f": "restored"}


def test_fifos_and_sockets_are_skipped_and_said(tmp_path):
    store, run_dir = make_store(tmp_path)
    os.mkfifo(run_dir / "pipe")
    server = socket.socket(socket.AF_UNIX)
    short = Path(f"/tmp/snap-{os.getpid()}.sock")
    try:
        server.bind(str(short))
        os.replace(short, run_dir / "sock")
        (run_dir / "plain").write_text("p")
        manifest = store.snapshot(RUN, WORKFLOW, 1)  # must not block on the FIFO
    finally:
        server.close()
        short.unlink(missing_ok=True)
    assert set(manifest.entries) == {"plain"}
    assert sorted(line.split(":")[0] for line in manifest.skipped) == ["pipe", "sock"]
    done = store.restore(RUN, WORKFLOW, 1, "fork")
    assert tree(done.directory) == {"plain": "p"}
    assert done.skipped_count == 2 and "FIFO" in done.skipped[0]


def test_a_file_over_the_snapshot_budget_is_skipped_and_said(tmp_path):
    workspace = Workspace(tmp_path / "ws", run_disk_bytes=1024 * 1024)
    store = SnapshotStore(workspace)
    run_dir = workspace.run_dir(RUN)
    (run_dir / "big.bin").write_bytes(b"x" * (2 * 1024 * 1024))
    (run_dir / "small.txt").write_text("fits")
    manifest = store.snapshot(RUN, WORKFLOW, 1)
    assert set(manifest.entries) == {"small.txt"}
    assert manifest.skipped == ["big.bin: 2097152 bytes, more than the snapshot budget of 1 MiB"]


def test_the_budget_bounds_all_blobs_of_a_directory_together(tmp_path):
    store, run_dir = make_store(tmp_path, run_disk_bytes=1024 * 1024)
    for step in (1, 2, 3):
        (run_dir / "data.bin").write_bytes(bytes([step]) * (400 * 1024))
        manifest = store.snapshot(RUN, WORKFLOW, step)
    assert "data.bin" not in manifest.entries
    assert "over what is left of the snapshot budget" in manifest.skipped[0]
    assert store.blob_bytes(RUN) <= 1024 * 1024


def test_nothing_is_copied_when_the_disk_is_below_its_reserve(tmp_path):
    free = os.statvfs(tmp_path).f_bavail * os.statvfs(tmp_path).f_frsize
    store, run_dir = make_store(tmp_path, reserve_bytes=free)  # as if the disk were full
    (run_dir / "a.txt").write_text("a")
    manifest = store.snapshot(RUN, WORKFLOW, 1)
    assert manifest.entries == {} and "the disk is nearly full" in manifest.skipped[0]


def test_a_flow_s_steps_share_a_directory_but_each_has_its_own_snapshots(tmp_path):
    store, run_dir = make_store(tmp_path)
    (run_dir / "step-one.txt").write_text("1")
    store.snapshot(RUN, "flow-x-step-1", 1)
    (run_dir / "step-two.txt").write_text("2")
    store.snapshot(RUN, "flow-x-step-2", 1)
    assert tree(store.restore(RUN, "flow-x-step-1", 1, "f1").directory) == {"step-one.txt": "1"}
    assert set(tree(store.restore(RUN, "flow-x-step-2", 1, "f2").directory)) == {"step-one.txt", "step-two.txt"}


def test_dropping_later_snapshots(tmp_path):
    store, run_dir = make_store(tmp_path)
    for step in (1, 2, 3):
        (run_dir / "n").write_text(str(step))
        store.snapshot(RUN, WORKFLOW, step)
    store.drop_after(RUN, WORKFLOW, 1)
    assert store.steps(RUN, WORKFLOW) == [1]


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads every file")
def test_an_unreadable_file_is_skipped_and_said(tmp_path):
    store, run_dir = make_store(tmp_path)
    closed = run_dir / "closed"
    closed.write_text("no")
    closed.chmod(0)
    manifest = store.snapshot(RUN, WORKFLOW, 1)
    assert manifest.skipped[0].startswith("closed: cannot be read")


def test_a_restore_writes_no_file_when_the_disk_is_below_its_reserve(tmp_path):
    store, run_dir = make_store(tmp_path)
    (run_dir / "sub").mkdir()
    (run_dir / "sub" / "a.txt").write_text("a")
    store.snapshot(RUN, WORKFLOW, 1)
    free = os.statvfs(tmp_path).f_bavail * os.statvfs(tmp_path).f_frsize
    low = SnapshotStore(Workspace(tmp_path / "ws", reserve_bytes=free))
    done = low.restore(RUN, WORKFLOW, 1, "fork")
    assert tree(done.directory) == {"sub": "/"}
    assert done.skipped[0].startswith("sub/a.txt: not restored: the disk is nearly full")


def test_a_snapshot_records_a_bounded_number_of_entries(tmp_path, monkeypatch):
    monkeypatch.setattr(workspace_snapshots, "MAX_ENTRIES", 5)
    store, run_dir = make_store(tmp_path)
    (run_dir / "sub").mkdir()
    for i in range(4):
        (run_dir / f"f{i}").write_text(str(i))
        (run_dir / "sub" / f"g{i}").write_text(str(i))
    manifest = store.snapshot(RUN, WORKFLOW, 1)
    assert len(manifest.entries) == 5 and manifest.skipped_count == 4
    assert all("past the 5 entries a snapshot records" in line for line in manifest.skipped)
