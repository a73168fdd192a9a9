"""str_replace_editor: viewing, editing, undo, confinement and retries."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import stat
import sys
import threading
import time
from pathlib import Path

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities import safe_files
from activities import file_editor as str_replace_editor
from tools.str_replace_editor import NAME, SCHEMA, StrReplaceEditor
from activities.workspace import Workspace
from agent_model.tool_io import ToolRequest, ToolResult

RUN = "run"


@pytest.fixture(autouse=True, params=["openat2", "walk"])
def resolution(request, monkeypatch) -> None:
    """Every test runs with both ways of resolving paths, which must agree."""
    if request.param == "openat2" and not safe_files.openat2_available():
        pytest.skip("openat2 is not available here")
    monkeypatch.setattr(safe_files, "USE_OPENAT2", request.param == "openat2")


@pytest.fixture
def workspace(tmp_path: Path) -> Workspace:
    return Workspace(tmp_path / "root")


@pytest.fixture
def run_dir(workspace: Workspace) -> Path:
    return workspace.run_dir(RUN)


@pytest.fixture
def editor(workspace: Workspace) -> StrReplaceEditor:
    return StrReplaceEditor(workspace)


async def edit(editor: StrReplaceEditor, env: ActivityEnvironment | None = None, **arguments) -> ToolResult:
    env = env or ActivityEnvironment()
    return await env.run(editor.run, ToolRequest(workspace=RUN, arguments=arguments))


def retry_environment() -> ActivityEnvironment:
    """An environment whose activity reports itself as a second attempt of the
    same execution the default environment runs."""
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, attempt=2)
    return env


def test_schema_shape() -> None:
    parameters = SCHEMA["function"]["parameters"]
    assert SCHEMA["function"]["name"] == NAME
    assert parameters["required"] == ["command", "path"]
    assert parameters["properties"]["command"]["enum"] == [
        "view", "create", "str_replace", "insert", "undo_edit"
    ]
    assert tuple(parameters["properties"]["command"]["enum"]) == str_replace_editor.COMMANDS  # what the worker does
    assert parameters["properties"]["insert_line"]["type"] == "integer"
    assert parameters["properties"]["view_range"]["items"] == {"type": "integer"}


@pytest.mark.asyncio
async def test_create_then_view(editor: StrReplaceEditor, run_dir: Path) -> None:
    created = await edit(editor, command="create", path="pkg/mod.py", file_text="a = 1\nb = 2\n")
    assert not created.error
    assert (run_dir / "pkg" / "mod.py").read_text() == "a = 1\nb = 2\n"
    viewed = await edit(editor, command="view", path="pkg/mod.py")
    assert "     1\ta = 1\n     2\tb = 2" in viewed.output


@pytest.mark.asyncio
async def test_create_refuses_an_existing_file(editor: StrReplaceEditor, run_dir: Path) -> None:
    (run_dir / "f.txt").write_text("keep me")
    result = await edit(editor, command="create", path="f.txt", file_text="new")
    assert result.error and "already exists" in result.output
    assert (run_dir / "f.txt").read_text() == "keep me"


@pytest.mark.asyncio
async def test_view_range(editor: StrReplaceEditor, run_dir: Path) -> None:
    (run_dir / "f.txt").write_text("".join(f"line {n}\n" for n in range(1, 11)))
    middle = await edit(editor, command="view", path="f.txt", view_range=[3, 5])
    assert "     3\tline 3\n     4\tline 4\n     5\tline 5" in middle.output
    assert "line 6" not in middle.output and "line 2\n" not in middle.output
    to_end = await edit(editor, command="view", path="f.txt", view_range=[9, -1])
    assert "     9\tline 9\n    10\tline 10" in to_end.output
    for bad in ([0, 2], [11, -1], [5, 3], [1], "1-3"):
        result = await edit(editor, command="view", path="f.txt", view_range=bad)
        assert result.error, bad


@pytest.mark.asyncio
async def test_long_view_is_clipped_with_a_hint(workspace: Workspace, run_dir: Path) -> None:
    (run_dir / "big.txt").write_text("".join(f"line {n}\n" for n in range(5000)))
    result = await edit(StrReplaceEditor(workspace, max_view_chars=500), command="view", path="big.txt")
    assert len(result.output) < 700
    assert "view_range" in result.output


@pytest.mark.asyncio
async def test_view_of_a_directory_lists_two_levels(editor: StrReplaceEditor, run_dir: Path) -> None:
    (run_dir / "a" / "b" / "c").mkdir(parents=True)
    (run_dir / "a" / "b" / "c" / "deep.txt").write_text("")
    (run_dir / "a" / "one.txt").write_text("")
    (run_dir / "top.txt").write_text("")
    (run_dir / ".hidden").mkdir()
    (run_dir / ".hidden" / "x.txt").write_text("")
    result = await edit(editor, command="view", path=".")
    lines = result.output.splitlines()[1:]
    assert lines == ["a/", "a/b/", "a/one.txt", "top.txt"]


@pytest.mark.asyncio
async def test_str_replace_exactly_once(editor: StrReplaceEditor, run_dir: Path) -> None:
    (run_dir / "f.py").write_text("x = 1\ny = 2\nx = 1\nz = 3\n")
    missing = await edit(editor, command="str_replace", path="f.py", old_str="w = 0", new_str="w = 1")
    assert missing.error and "not found" in missing.output
    several = await edit(editor, command="str_replace", path="f.py", old_str="x = 1", new_str="x = 2")
    assert several.error and "2 times" in several.output and "lines 1, 3" in several.output
    assert (run_dir / "f.py").read_text() == "x = 1\ny = 2\nx = 1\nz = 3\n"
    once = await edit(editor, command="str_replace", path="f.py", old_str="y = 2", new_str="y = 20\ny2 = 4")
    assert not once.error
    assert (run_dir / "f.py").read_text() == "x = 1\ny = 20\ny2 = 4\nx = 1\nz = 3\n"
    assert "     2\ty = 20\n     3\ty2 = 4" in once.output
    deleted = await edit(editor, command="str_replace", path="f.py", old_str="z = 3\n")
    assert not deleted.error
    assert (run_dir / "f.py").read_text() == "x = 1\ny = 20\ny2 = 4\nx = 1\n"


@pytest.mark.asyncio
async def test_insert(editor: StrReplaceEditor, run_dir: Path) -> None:
    (run_dir / "f.txt").write_text("one\ntwo\n")
    assert not (await edit(editor, command="insert", path="f.txt", insert_line=0, new_str="zero")).error
    assert not (await edit(editor, command="insert", path="f.txt", insert_line=3, new_str="three\n")).error
    middle = await edit(editor, command="insert", path="f.txt", insert_line=2, new_str="one and a half")
    assert "     3\tone and a half" in middle.output
    assert (run_dir / "f.txt").read_text() == "zero\none\none and a half\ntwo\nthree\n"
    for line in (-1, 6, "2", None):
        result = await edit(editor, command="insert", path="f.txt", insert_line=line, new_str="x")
        assert result.error, line


@pytest.mark.asyncio
async def test_undo_walks_back_through_edits(editor: StrReplaceEditor, run_dir: Path) -> None:
    path = run_dir / "f.txt"
    await edit(editor, command="create", path="f.txt", file_text="a\n")
    await edit(editor, command="str_replace", path="f.txt", old_str="a", new_str="b")
    await edit(editor, command="insert", path="f.txt", insert_line=1, new_str="c")
    assert path.read_text() == "b\nc\n"
    assert not (await edit(editor, command="undo_edit", path="f.txt")).error
    assert path.read_text() == "b\n"
    assert not (await edit(editor, command="undo_edit", path="f.txt")).error
    assert path.read_text() == "a\n"
    assert not (await edit(editor, command="undo_edit", path="f.txt")).error
    assert not path.exists()
    nothing_left = await edit(editor, command="undo_edit", path="f.txt")
    assert nothing_left.error and "no edit" in nothing_left.output


@pytest.mark.asyncio
async def test_undo_history_survives_a_new_editor(workspace: Workspace, run_dir: Path) -> None:
    await edit(StrReplaceEditor(workspace), command="create", path="f.txt", file_text="first\n")
    await edit(
        StrReplaceEditor(workspace), command="str_replace", path="f.txt", old_str="first", new_str="second"
    )
    result = await edit(StrReplaceEditor(workspace), command="undo_edit", path="f.txt")
    assert not result.error
    assert (run_dir / "f.txt").read_text() == "first\n"
    history_files = list(workspace.history_dir(RUN).iterdir())
    assert len(history_files) == 1 and run_dir not in history_files[0].parents


@pytest.mark.asyncio
async def test_paths_outside_the_run_dir_are_refused(
    editor: StrReplaceEditor, run_dir: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("secret")
    (run_dir / "secret_link").symlink_to(outside / "secret.txt")
    (run_dir / "dir_link").symlink_to(outside)
    attempts = [
        dict(command="view", path="../x"),
        dict(command="view", path="/etc/passwd"),
        dict(command="view", path=str(outside / "secret.txt")),
        dict(command="view", path="secret_link"),
        dict(command="view", path="dir_link"),
        dict(command="create", path="../escape.txt", file_text="x"),
        dict(command="create", path="dir_link/new.txt", file_text="x"),
        dict(command="str_replace", path="secret_link", old_str="secret", new_str="changed"),
        dict(command="insert", path="dir_link/secret.txt", insert_line=0, new_str="x"),
    ]
    for arguments in attempts:
        result = await edit(editor, **arguments)
        assert result.error, arguments
        assert "outside the run's working directory" in result.output
        assert "\tsecret" not in result.output  # the file's content never shows
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert (outside / "secret.txt").read_text() == "secret"
    assert not (tmp_path / "root" / "escape.txt").exists()


@pytest.mark.asyncio
async def test_binary_files_are_refused(editor: StrReplaceEditor, run_dir: Path) -> None:
    (run_dir / "blob.bin").write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff")
    (run_dir / "latin1.txt").write_bytes("café".encode("latin-1"))
    for path in ("blob.bin", "latin1.txt"):
        result = await edit(editor, command="view", path=path)
        assert result.error and "not a text file" in result.output


@pytest.mark.asyncio
async def test_missing_arguments(editor: StrReplaceEditor, run_dir: Path) -> None:
    (run_dir / "f.txt").write_text("a\n")
    malformed = ({"command": "delete", "path": "f.txt"}, {"command": "view"}, {"command": "view", "path": 3})
    for arguments in malformed:
        with pytest.raises(ApplicationError) as raised:
            await edit(editor, **arguments)
        assert raised.value.type == "BadToolArguments" and raised.value.non_retryable
    assert (await edit(editor, command="create", path="g.txt")).error
    assert (await edit(editor, command="str_replace", path="f.txt")).error
    assert (await edit(editor, command="view", path="nope.txt")).error


@pytest.mark.asyncio
async def test_retried_create_reports_success(editor: StrReplaceEditor, run_dir: Path) -> None:
    first = await edit(editor, command="create", path="f.txt", file_text="hello\n")
    retried = await edit(editor, retry_environment(), command="create", path="f.txt", file_text="hello\n")
    assert not retried.error and retried.output == first.output
    # The retry did not add a second history entry.
    await edit(editor, command="undo_edit", path="f.txt")
    assert not (run_dir / "f.txt").exists()
    assert (await edit(editor, command="undo_edit", path="f.txt")).error


@pytest.mark.asyncio
async def test_retried_edits_are_not_applied_twice(editor: StrReplaceEditor, run_dir: Path) -> None:
    (run_dir / "f.txt").write_text("a\n")
    insert = dict(command="insert", path="f.txt", insert_line=1, new_str="b")
    await edit(editor, **insert)
    retried = await edit(editor, retry_environment(), **insert)
    assert not retried.error
    assert (run_dir / "f.txt").read_text() == "a\nb\n"
    replace = dict(command="str_replace", path="f.txt", old_str="b", new_str="c")
    await edit(editor, **replace)
    retried = await edit(editor, retry_environment(), **replace)
    assert not retried.error
    assert (run_dir / "f.txt").read_text() == "a\nc\n"
    await edit(editor, command="undo_edit", path="f.txt")
    await edit(editor, retry_environment(), command="undo_edit", path="f.txt")
    assert (run_dir / "f.txt").read_text() == "a\nb\n"


@pytest.mark.asyncio
async def test_a_new_call_with_the_same_arguments_is_applied(editor: StrReplaceEditor, run_dir: Path) -> None:
    (run_dir / "f.txt").write_text("a\n")
    await edit(editor, command="insert", path="f.txt", insert_line=1, new_str="b")
    await edit(editor, command="insert", path="f.txt", insert_line=1, new_str="b")
    assert (run_dir / "f.txt").read_text() == "a\nb\nb\n"


@pytest.mark.asyncio
async def test_retry_completes_an_edit_whose_write_was_lost(editor: StrReplaceEditor, run_dir: Path) -> None:
    await edit(editor, command="create", path="f.txt", file_text="new\n")
    (run_dir / "f.txt").unlink()  # as if the worker died between recording and writing
    retried = await edit(editor, retry_environment(), command="create", path="f.txt", file_text="new\n")
    assert not retried.error
    assert (run_dir / "f.txt").read_text() == "new\n"


# --- a run directory changed by hostile tool code -----------------------------------
#
# Tool processes can swap any entry of the run directory for a FIFO, a device, a
# symlink or a hard link, also while an editor call is under way. Nothing may
# block the worker's thread, and nothing outside the run directory may be read
# or written.

EDITOR_SOURCES = {
    str(Path(module.__file__).resolve()) for module in (str_replace_editor, safe_files)
}


def busy_editor_threads() -> list[str]:
    """Threads (other than this one) that are inside the editor's code."""
    busy = []
    for thread_id, frame in sys._current_frames().items():
        if thread_id == threading.get_ident():
            continue
        while frame is not None:
            if str(Path(frame.f_code.co_filename).resolve()) in EDITOR_SOURCES:
                busy.append(f"thread {thread_id} in {frame.f_code.co_name}")
                break
            frame = frame.f_back
    return busy


@pytest.fixture
def make_fifo():
    """mkfifo, and at teardown release any thread still blocked on the FIFOs
    (a reader waiting for a writer or the reverse), so that a failing test
    does not hang the session."""
    made: list[Path] = []

    def make(path: Path) -> Path:
        os.mkfifo(path)
        made.append(path)
        return path

    yield make
    for path in made:
        for flags in (os.O_WRONLY, os.O_RDONLY):
            with contextlib.suppress(OSError):
                os.close(os.open(path, flags | os.O_NONBLOCK))


async def quick_edit(editor: StrReplaceEditor, **arguments) -> tuple[ToolResult, float]:
    """The call's result and how long it took; fails (rather than hangs) if it
    takes more than 5 s."""
    started = time.monotonic()
    result = await asyncio.wait_for(edit(editor, **arguments), 5)
    return result, time.monotonic() - started


FIFO_CALLS = {
    "view": dict(command="view", path="f.txt"),
    "str_replace": dict(command="str_replace", path="f.txt", old_str="a", new_str="b"),
    "insert": dict(command="insert", path="f.txt", insert_line=0, new_str="x"),
    "undo_edit": dict(command="undo_edit", path="f.txt"),
    "create": dict(command="create", path="f.txt", file_text="x"),
}


@pytest.mark.timeout(20)
@pytest.mark.parametrize("command", FIFO_CALLS)
async def test_a_fifo_is_refused_at_once(
    editor: StrReplaceEditor, run_dir: Path, make_fifo, command: str
) -> None:
    if command == "undo_edit":
        await edit(editor, command="create", path="f.txt", file_text="a\n")
        (run_dir / "f.txt").unlink()
    make_fifo(run_dir / "f.txt")
    (run_dir / "other.txt").write_text("still works\n")

    result, seconds = await quick_edit(editor, **FIFO_CALLS[command])

    assert result.error and seconds < 2
    if command == "create":
        assert "already exists" in result.output
    else:
        assert "f.txt is not a regular file (it is a FIFO)" in result.output
    assert stat.S_ISFIFO((run_dir / "f.txt").lstat().st_mode)
    assert busy_editor_threads() == []
    after, seconds = await quick_edit(editor, command="view", path="other.txt")
    assert "still works" in after.output and seconds < 2


@pytest.mark.timeout(20)
async def test_a_symlink_swapped_in_during_undo_is_not_written_through(
    editor: StrReplaceEditor, run_dir: Path, tmp_path: Path, make_fifo
) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("secret\n")
    await edit(editor, command="create", path="f.txt", file_text="original\n")
    await edit(editor, command="str_replace", path="f.txt", old_str="original", new_str="changed")
    target = run_dir / "f.txt"
    target.unlink()
    make_fifo(target)
    done = threading.Event()

    def attacker() -> None:
        # Waits until the editor opens the FIFO, then replaces the name with a
        # symlink to the secret and feeds the edit's content through the FIFO.
        while not done.is_set():
            try:
                writer = os.open(target, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:  # no reader yet (ENXIO), or already swapped
                time.sleep(0.001)
                continue
            target.unlink()
            target.symlink_to(secret)
            os.write(writer, b"changed\n")
            os.close(writer)
            return

    thread = threading.Thread(target=attacker, daemon=True)
    thread.start()
    try:
        result, seconds = await quick_edit(editor, command="undo_edit", path="f.txt")
    finally:
        done.set()
        thread.join(5)
    assert secret.read_text() == "secret\n"
    assert result.error and seconds < 2
    assert "secret" not in result.output.replace(str(tmp_path), "")


@pytest.mark.timeout(20)
async def test_a_parent_swapped_for_an_outside_symlink_during_create_is_not_followed(
    editor: StrReplaceEditor, run_dir: Path, tmp_path: Path, make_fifo
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (run_dir / "sub").mkdir()
    fifo = make_fifo(run_dir / "sub" / "new.txt")
    done = threading.Event()

    def attacker() -> None:
        while not done.is_set():
            try:
                writer = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:
                time.sleep(0.001)
                continue
            (run_dir / "sub").rename(run_dir / "old_sub")
            (run_dir / "sub").symlink_to(outside)
            os.close(writer)
            return

    thread = threading.Thread(target=attacker, daemon=True)
    thread.start()
    try:
        result, seconds = await quick_edit(editor, command="create", path="sub/new.txt", file_text="x\n")
    finally:
        done.set()
        thread.join(5)
    assert list(outside.iterdir()) == []
    assert result.error and seconds < 2


@pytest.mark.asyncio
async def test_a_hard_link_to_an_outside_file_is_not_written(
    editor: StrReplaceEditor, run_dir: Path, tmp_path: Path
) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("secret\n")
    os.link(secret, run_dir / "linked.txt")
    attempts = [
        dict(command="str_replace", path="linked.txt", old_str="secret", new_str="changed"),
        dict(command="insert", path="linked.txt", insert_line=0, new_str="changed"),
        dict(command="undo_edit", path="linked.txt"),
    ]
    for arguments in attempts:
        result = await edit(editor, **arguments)
        assert result.error, arguments
        assert "linked.txt has 2 hard links" in result.output
        assert "\tsecret" not in result.output
    assert secret.read_text() == "secret\n"


@pytest.mark.timeout(20)
async def test_device_files_are_refused(editor: StrReplaceEditor, run_dir: Path) -> None:
    zero = run_dir / "zero"
    try:
        os.mknod(zero, 0o666 | stat.S_IFCHR, os.makedev(1, 5))  # like /dev/zero
    except PermissionError:
        pytest.skip("creating a device node needs CAP_MKNOD")
    (run_dir / "abs_zero").symlink_to("/dev/zero")
    (run_dir / "rel_zero").symlink_to(os.path.relpath("/dev/zero", run_dir))
    # view first: the old editor read an undo target without any check, and
    # reading a /dev/zero never ends.
    for command in ("view", "str_replace", "insert", "undo_edit"):
        arguments = dict(command=command, path="zero", old_str="a", new_str="b", insert_line=0)
        result, seconds = await quick_edit(editor, **arguments)
        assert result.error and seconds < 2, command
        assert "zero is not a regular file (it is a character device)" in result.output, command
    for path in ("abs_zero", "rel_zero"):
        for command in ("view", "undo_edit"):
            result, seconds = await quick_edit(editor, command=command, path=path)
            assert result.error and seconds < 2
            assert "outside the run's working directory" in result.output


@pytest.mark.timeout(20)
async def test_a_file_over_the_size_limit_is_refused_even_by_undo(
    editor: StrReplaceEditor, run_dir: Path
) -> None:
    await edit(editor, command="create", path="f.txt", file_text="a\n")
    with open(run_dir / "f.txt", "r+b") as file:
        file.truncate(str_replace_editor.MAX_FILE_BYTES + 1)  # sparse: cheap to make
    for command in ("view", "str_replace", "undo_edit"):
        result = await edit(editor, command=command, path="f.txt", old_str="a", new_str="b")
        assert result.error, command
        assert "f.txt is larger than 10 MiB" in result.output, command
    assert (run_dir / "f.txt").stat().st_size == str_replace_editor.MAX_FILE_BYTES + 1


@pytest.mark.asyncio
async def test_created_files_belong_to_the_run_directory_owner(
    editor: StrReplaceEditor, run_dir: Path
) -> None:
    if os.geteuid() != 0:
        pytest.skip("only a root worker hands files over to the tools' uid")
    os.chown(run_dir, 65534, 65534)
    assert not (await edit(editor, command="create", path="pkg/sub/mod.py", file_text="x = 1\n")).error
    for path in (run_dir / "pkg", run_dir / "pkg" / "sub", run_dir / "pkg" / "sub" / "mod.py"):
        assert (path.stat().st_uid, path.stat().st_gid) == (65534, 65534), path


@pytest.mark.asyncio
async def test_symlinks_that_stay_inside_are_followed(editor: StrReplaceEditor, run_dir: Path) -> None:
    (run_dir / "src").mkdir()
    (run_dir / "src" / "real.py").write_text("x = 1\n")
    (run_dir / "rel.py").symlink_to("src/real.py")
    (run_dir / "abs.py").symlink_to(run_dir / "src" / "real.py")
    (run_dir / "src_link").symlink_to("src")
    for path in ("rel.py", "abs.py", "src_link/real.py"):
        assert "x = 1" in (await edit(editor, command="view", path=path)).output, path
    result = await edit(editor, command="str_replace", path="rel.py", old_str="x = 1", new_str="x = 2")
    assert not result.error
    assert (run_dir / "src" / "real.py").read_text() == "x = 2\n"
    assert (run_dir / "rel.py").is_symlink()


@pytest.mark.timeout(20)
async def test_a_stuck_call_answers_by_its_deadline(
    workspace: Workspace, run_dir: Path, make_fifo
) -> None:
    # Nothing a tool can do blocks the editor any more, so stand in for a stuck
    # filesystem with the worker-private undo history turned into a FIFO.
    editor = StrReplaceEditor(workspace, deadline_seconds=1)
    await edit(editor, command="create", path="f.txt", file_text="a\n")
    [history_file] = workspace.history_dir(RUN).iterdir()
    history_file.unlink()
    make_fifo(history_file)
    started = time.monotonic()
    result = await asyncio.wait_for(
        edit(editor, command="str_replace", path="f.txt", old_str="a", new_str="b"), 5
    )
    assert result.error and "did not finish within 1 s" in result.output
    assert time.monotonic() - started < 3


@pytest.mark.asyncio
async def test_writes_past_the_runs_disk_quota_are_refused(tmp_path: Path) -> None:
    """[tools] run_disk_mb holds for the editor too; a write that shrinks a file is always allowed."""
    from runtime.worker_factory import worker_resources
    from testkit.settings import make_settings
    from tools import TOOLS

    settings = make_settings("http://127.0.0.1:9/v1", tmp_path / "ws").model_copy(update={"tool_run_disk_mb": 1})
    resources = worker_resources(settings)
    editor = TOOLS[NAME].build(resources)
    run_dir = resources.workspace.run_dir(RUN)

    async def call(**arguments) -> ToolResult:
        return await ActivityEnvironment().run(editor, ToolRequest(workspace=RUN, arguments=arguments))

    big = "x" * 600_000 + "\n"
    assert not (await call(command="create", path="a.txt", file_text=big)).error
    refused = await call(command="create", path="b.txt", file_text=big)
    assert refused.error and "over its 1 MiB quota; delete files to go on" in refused.output, refused.output
    assert not (run_dir / "b.txt").exists()
    grown = await call(command="insert", path="a.txt", insert_line=0, new_str=big)
    assert grown.error and "quota" in grown.output
    assert (run_dir / "a.txt").stat().st_size == len(big)
    shrunk = await call(command="str_replace", path="a.txt", old_str=big, new_str="short\n")
    assert not shrunk.error, shrunk.output
    assert (run_dir / "a.txt").read_text() == "short\n"
