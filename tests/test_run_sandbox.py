"""One sandbox per run (activities/tools/run_sandbox.py, exec_server.py):
the calls of a run enter the sandbox its first call started, and still get
everything a sandbox of their own gave them. Attacked as model-written code
would: leftovers for the next call, the server beside it, killing the
server, a worker that dies under a call. (test_sandbox.py runs its attacks
through this path too, since it is the default.)"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from temporalio.testing import ActivityEnvironment

from agent_model.tool_io import ToolRequest
from activities.tools.sandbox import ToolSandbox
from activities.workspace import Workspace
from tests.test_sandbox import require
from tools.bash import Bash
from tools.python_execute import PythonExecute

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def confined(tmp_path):
    root = tmp_path / "root"
    sandbox = ToolSandbox.detect("auto", root)
    require(sandbox.mode == "bwrap", f"bubblewrap ({sandbox.problem})")
    yield Workspace(root), sandbox
    if sandbox.runs is not None:
        sandbox.runs.close_all()


async def bash(workspace, sandbox, command: str, run: str = "run-1", timeout: float = 120.0):
    tool = Bash(workspace, timeout=timeout, sandbox=sandbox)
    return await ActivityEnvironment().run(tool.run, ToolRequest(workspace=run, arguments={"command": command}))


async def python(workspace, sandbox, code: str, run: str = "run-1") -> str:
    tool = PythonExecute(workspace, timeout=30, sandbox=sandbox)
    result = await ActivityEnvironment().run(tool.run, ToolRequest(workspace=run, arguments={"code": code}))
    return result.output


PID_NAMESPACE = "readlink /proc/self/ns/pid"

pytestmark = pytest.mark.e2e  # each test starts sandboxes and kills what they hold: the default tier stays under 5 min


def namespace_of(output: str) -> str:
    """The pid namespace a PID_NAMESPACE call printed; bash may warn before it
    (`fork: retry`) when the tool user's processes are many (another test's fork bomb)."""
    return output.strip().splitlines()[-1] if output.strip() else ""


async def test_the_calls_of_a_run_enter_one_sandbox_and_each_run_has_its_own(confined):
    workspace, sandbox = confined
    first = namespace_of((await bash(workspace, sandbox, PID_NAMESPACE)).output)
    second = namespace_of((await bash(workspace, sandbox, PID_NAMESPACE)).output)
    other_run = namespace_of((await bash(workspace, sandbox, PID_NAMESPACE, run="run-2")).output)
    assert first.startswith("pid:["), first
    assert first == second, "a later call of the run started a sandbox of its own"
    assert other_run != first, "two runs shared a sandbox"


def test_the_operator_can_give_every_call_a_sandbox_of_its_own(tmp_path):
    from testkit.settings import load_config

    assert load_config(tmp_path, "").tool_sandbox_per_run is True
    assert load_config(tmp_path, "[tools]\nsandbox_per_run = false\n").tool_sandbox_per_run is False
    per_call = ToolSandbox.detect("auto", tmp_path / "root", per_run=False)
    require(per_call.mode == "bwrap", "bubblewrap")
    assert per_call.runs is None and "one per call" in per_call.describe()
    internet = ToolSandbox.detect("auto", tmp_path / "root", network="internet")
    assert internet.runs is None, "the egress proxy is per call: so is the sandbox"


async def test_per_call_sandboxes_when_the_operator_says_so(tmp_path):
    sandbox = ToolSandbox.detect("auto", tmp_path / "root", per_run=False)
    require(sandbox.mode == "bwrap", "bubblewrap")
    workspace = Workspace(tmp_path / "root")
    first = namespace_of((await bash(workspace, sandbox, PID_NAMESPACE)).output)
    second = namespace_of((await bash(workspace, sandbox, PID_NAMESPACE)).output)
    assert first != second


async def test_nothing_a_call_left_is_there_for_the_next(confined):
    workspace, sandbox = confined
    mark = f"{os.getpid()}{time.monotonic_ns() % 10**6:06d}"
    await bash(
        workspace,
        sandbox,
        f"echo left > /tmp/note; mkdir -p /tmp/d/e; (sleep 300.{mark} &); setsid sleep 301.{mark} & "
        f"nohup sleep 302.{mark} >/dev/null 2>&1 & echo started",
    )
    out = await python(workspace, sandbox, """
import os
print("tmp:", sorted(os.listdir("/tmp")))
mine = {os.getpid(), os.getppid()}
others = []
for pid in os.listdir("/proc"):
    if pid.isdigit() and int(pid) not in mine:
        others.append(open(f"/proc/{pid}/cmdline", "rb").read().split(b"\\0")[0].decode())
print("others:", sorted(others))
""")
    # Only the bind mounts' parent directories of the run directory may stand in /tmp.
    left = out.split("tmp:")[1].split("\n")[0]
    assert "'note'" not in left and "'d'" not in left, out
    # Left beside this call: bubblewrap's init and the run's server, nothing of the first call.
    others = out.split("others:")[1]
    assert "sleep" not in others, out
    survivors = subprocess.run(["pgrep", "-f", f"sleep 30[012][.]{mark}"], capture_output=True, text=True).stdout
    assert survivors.split() == [], "background processes outlived the call that started them"


SERVER_PROBE = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
def name(pid):
    return open(f"/proc/{pid}/cmdline", "rb").read()
server = [int(p) for p in os.listdir("/proc") if p.isdigit() and p != "1" and b"--control-fd" in name(p)]  # pid 1: bubblewrap
print("server count:", len(server))
for pid in server:
    print("attach:", libc.ptrace(16, pid, 0, 0), ctypes.get_errno())  # PTRACE_ATTACH
    for what in ("environ", "mem", "fd"):
        try:
            (os.listdir if what == "fd" else open)(f"/proc/{pid}/{what}")
            print(what, "open")
        except OSError as e:
            print(what, type(e).__name__)
"""


async def test_a_call_can_neither_trace_nor_read_the_server(confined):
    workspace, sandbox = confined
    await bash(workspace, sandbox, "true")
    out = await python(workspace, sandbox, SERVER_PROBE)
    assert "server count: 1" in out, out
    assert "attach: -1 1" in out, out  # EPERM
    assert " open" not in out, out


async def test_a_call_that_kills_the_server_ends_and_the_next_call_has_a_new_sandbox(confined):
    workspace, sandbox = confined
    before = namespace_of((await bash(workspace, sandbox, PID_NAMESPACE)).output)
    began = time.monotonic()
    killed = await python(workspace, sandbox, """
import os, signal, time
for pid in os.listdir("/proc"):
    if pid.isdigit() and int(pid) not in (os.getpid(), 1):
        try:
            os.kill(int(pid), signal.SIGKILL)
        except OSError:
            pass
time.sleep(20)
print("still here")
""")
    assert "still here" not in killed
    assert time.monotonic() - began < 15, "the call outlived its server"
    after = namespace_of((await bash(workspace, sandbox, PID_NAMESPACE)).output)
    assert after.startswith("pid:[") and after != before


async def test_a_timed_out_call_is_killed_and_the_run_goes_on(confined):
    workspace, sandbox = confined
    mark = f"{os.getpid()}{time.monotonic_ns() % 10**6:06d}"
    began = time.monotonic()
    result = await bash(workspace, sandbox, f"setsid sleep 303.{mark} & sleep 304.{mark}", timeout=2)
    assert "timed out after 2 s" in result.output and result.error
    assert time.monotonic() - began < 10
    assert (await bash(workspace, sandbox, "echo fine")).output.strip() == "fine"
    assert subprocess.run(["pgrep", "-f", f"sleep 30[34][.]{mark}"], capture_output=True).stdout == b""


DYING_WORKER = """
import asyncio, sys
from pathlib import Path
sys.path.insert(0, {repo!r})
from tools.bash import Bash
from activities.tools.sandbox import ToolSandbox
from activities.workspace import Workspace
from agent_model.tool_io import ToolRequest
root = Path({root!r})
sandbox = ToolSandbox.detect("auto", root)
tool = Bash(Workspace(root), sandbox=sandbox)
async def main():
    await tool.run(ToolRequest(workspace="idle-run", arguments={{"command": "sleep 305.{mark} & true"}}))
    await tool.run(ToolRequest(workspace="run-1", arguments={{"command": "echo > started; sleep 306.{mark}"}}))
asyncio.run(main())
"""


async def test_the_sandboxes_die_with_their_worker(confined, tmp_path):
    """SIGKILL of the worker: the sandbox of the call in flight and the idle
    sandbox of another run go with it."""
    workspace, _ = confined
    mark = f"{os.getpid()}{time.monotonic_ns() % 10**6:06d}"
    worker = subprocess.Popen(
        [sys.executable, "-c", DYING_WORKER.format(repo=str(REPO), root=str(workspace.root), mark=mark)], cwd=REPO
    )
    started = workspace.run_dir("run-1") / "started"
    # Each sandbox's bubblewrap names the run directory it binds: this test's own.
    sandboxes = ["pgrep", "-f", f"bind {workspace.root}/"]
    try:
        for _ in range(300):
            if started.exists():
                break
            await asyncio.sleep(0.05)
        assert started.exists(), "the call never started"
        assert len(subprocess.run(sandboxes, capture_output=True).stdout.split()) >= 2
        worker.send_signal(signal.SIGKILL)
        worker.wait()
    finally:
        worker.kill()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        calls = subprocess.run(["pgrep", "-f", f"sleep 30[56][.]{mark}"], capture_output=True).stdout
        boxes = subprocess.run(sandboxes, capture_output=True).stdout
        if not calls and not boxes:
            break
        await asyncio.sleep(0.1)
    assert not calls, "a call outlived its worker"
    assert not boxes, "a run's sandbox outlived its worker"


async def test_a_call_at_the_memory_cap_is_killed_and_its_sandbox_stays(tmp_path):
    """The sandbox's cgroup caps the call of the moment: three children of
    300 MB each under 512 MiB must not all live, and the kernel's choice falls
    on the call, never on the server beside it."""
    root = tmp_path / "root"
    sandbox = ToolSandbox.detect("auto", root, memory_bytes=512 * 1024**2)
    require(sandbox.mode == "bwrap", "bubblewrap")
    require(sandbox.cgroups is not None and "memory" in sandbox.cgroups.parents, "a writable memory cgroup")
    workspace = Workspace(root)
    try:
        before = namespace_of((await bash(workspace, sandbox, PID_NAMESPACE)).output)
        out = await python(workspace, sandbox, """
import subprocess, sys
hog = "b = bytearray(300 * 1024 * 1024); import time; time.sleep(3); print('kept', len(b))"
children = [subprocess.Popen([sys.executable, "-c", hog]) for _ in range(3)]
print("exits:", sorted(c.wait() for c in children))
""")
        exits = out.split("exits:")[1].split("]")[0] if "exits:" in out else ""
        assert "-9" in exits or "out of memory" in out, out
        after = namespace_of((await bash(workspace, sandbox, PID_NAMESPACE)).output)
        assert after == before, "the run's sandbox died with the call"
        groups = [d for box in sandbox.runs.running.values() if box.group for d in box.group.dirs]
        assert groups and all(d.name.startswith("run-") for d in groups)
    finally:
        sandbox.runs.close_all()
    assert [d for d in groups if d.exists()] == [], "a closed sandbox left its cgroup"
