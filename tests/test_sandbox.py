"""The tool sandbox around python_execute and bash, attacked as model-written
code would attack it: the network, capabilities, mounts, other processes,
other runs, resources, a frozen worker, and a machine without bubblewrap.

CI installs bubblewrap (.ci/run), so there these tests must run; elsewhere
they are skipped when the machine cannot confine processes.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from temporalio.testing import ActivityEnvironment

from tools.bash import Bash
from activities.tools.process import LEASE_SECONDS
from tools.python_execute import PythonExecute
from activities.tools.sandbox import SandboxUnavailable, ToolSandbox
from activities.workspace import Workspace
from agent_model.tool_io import ToolRequest

REPO = Path(__file__).resolve().parent.parent
SECRET = "sk-sandbox-secret-123"


def require(available: bool, what: str) -> None:
    if not available:
        if os.environ.get("CI"):
            pytest.fail(f"{what} must be available in CI (see .ci/run)")
        pytest.skip(f"{what} is not available on this machine")


@pytest.fixture
def setup(tmp_path):
    root = tmp_path / "root"
    config = tmp_path / "config.toml"
    config.write_text(f'[llm]\napi_key = "{SECRET}"\n')
    sandbox = ToolSandbox.detect("auto", root, hidden_files=[config])
    require(sandbox.mode == "bwrap", f"bubblewrap ({sandbox.problem})")
    workspace = Workspace(root)
    (workspace.run_dir("other-run") / "private.txt").write_text("other run's data")
    return workspace, sandbox, config


async def python(workspace, sandbox, code: str, timeout: float = 30.0, run: str = "run-1") -> str:
    tool = PythonExecute(workspace, timeout=timeout, sandbox=sandbox)
    result = await ActivityEnvironment().run(tool.run, ToolRequest(workspace=run, arguments={"code": code}))
    return result.output


async def bash(workspace, sandbox, command: str, cwd: str | None = None):
    tool = Bash(workspace, sandbox=sandbox)
    return await ActivityEnvironment().run(
        tool.run, ToolRequest(workspace="run-1", arguments={"command": command}, cwd=cwd)
    )


# ---- files ---------------------------------------------------------------------


async def test_only_the_run_directory_is_writable(setup, tmp_path):
    workspace, sandbox, _ = setup
    out = await python(workspace, sandbox, """
import os
open("inside.txt", "w").write("ok")
for path in ["/etc/dm-test", os.path.expanduser("~/../escape.txt"), "../escape.txt", "/tmp/private.txt"]:
    try:
        open(path, "w").write("x")
        print("wrote", path)
    except OSError as e:
        print("refused", path, type(e).__name__)
""")
    # Writes outside the run directory fail, or land in a private scratch
    # filesystem that disappears with the call: never in the real one.
    assert (workspace.run_dir("run-1") / "inside.txt").read_text() == "ok"
    assert "refused /etc/dm-test" in out
    assert not (workspace.root / "escape.txt").exists()
    assert not Path("/etc/dm-test").exists()
    assert not Path("/tmp/private.txt").exists()  # /tmp is private to the call


async def test_the_live_journals_are_neither_readable_nor_forgeable(setup):
    """The journals of the live feed lie beside the run directories (activities/live_feed.py)."""
    from activities.live_feed import LiveFeed
    from agent_model.live_events import journal_path

    workspace, sandbox, _ = setup
    async with LiveFeed(workspace.root).journal("run-1", 1) as journal:
        journal.add("content", "a thought of run-1")
    path = journal_path(workspace.root, "run-1")
    out = await python(workspace, sandbox, f"""
import os
for attempt in ("read", "write"):
    try:
        if attempt == "read":
            print("read:", open({str(path)!r}).read())
        else:
            os.makedirs({str(path.parent)!r}, exist_ok=True)
            open({str(path)!r}, "w").write("forged")
            print("wrote")
    except OSError as e:
        print(attempt, "refused", type(e).__name__)
print(sorted(os.listdir({str(workspace.root)!r})))
""")
    assert "a thought of run-1" not in out and "read refused" in out, out
    assert "forged" not in path.read_text() and "a thought of run-1" in path.read_text()


async def test_other_runs_the_code_and_the_config_are_not_there(setup):
    workspace, sandbox, config = setup
    out = await python(workspace, sandbox, f"""
import os
print(sorted(os.listdir({str(workspace.root)!r})))
for path in [{str(config)!r}, {str(REPO / "config" / "settings.py")!r}, "/run", "/home", "/root/.bashrc", "/var"]:
    try:
        print(path, "readable:", len(open(path).read()) if os.path.isfile(path) else os.listdir(path))
    except OSError as e:
        print(path, type(e).__name__)
print("other:", os.path.exists({str(workspace.root / "other-run" / "private.txt")!r}))
""")
    assert "['run-1']" in out
    assert "readable" not in out and SECRET not in out, out
    assert "other: False" in out


async def test_the_worker_and_other_processes_are_out_of_sight(setup):
    workspace, sandbox, _ = setup
    holder = subprocess.Popen(["sleep", "30"], env={"OPENAI_API_KEY": SECRET, "PATH": os.environ["PATH"]})
    try:
        out = await python(workspace, sandbox, f"""
import os
found = []
for pid in os.listdir("/proc"):
    if pid.isdigit():
        try:
            found.append(open(f"/proc/{{pid}}/environ", "rb").read())
        except OSError:
            pass
print("secret seen:", any({SECRET!r}.encode() in e for e in found))
print("holder visible:", os.path.exists("/proc/{holder.pid}/environ"), "worker visible:", os.path.exists("/proc/{os.getpid()}/environ"))
print("key in env:", "OPENAI_API_KEY" in os.environ)
""")
    finally:
        holder.kill()
        holder.wait()
    assert "secret seen: False" in out
    assert "holder visible: False worker visible: False" in out or str(holder.pid) in ("1", "2")
    assert "key in env: False" in out


# ---- privileges ------------------------------------------------------------------


async def test_no_capabilities_no_new_privileges_and_no_remount(setup):
    workspace, sandbox, _ = setup
    result = await bash(workspace, sandbox, """
grep -E '^(Uid|CapEff|CapPrm|CapBnd|CapAmb|NoNewPrivs):' /proc/self/status
umount -l /proc 2>/dev/null && echo UMOUNTED
mount -o remount,bind,rw / 2>/dev/null && echo REMOUNTED
mount -t proc proc /tmp 2>/dev/null && echo MOUNTED
unshare -U true 2>/dev/null && echo USERNS
touch /usr/dm-test 2>/dev/null && echo WROTE_USR
echo done
""")
    fields = dict(line.split(":\t", 1) for line in result.output.splitlines() if ":\t" in line)
    for cap in ("CapEff", "CapPrm", "CapBnd", "CapAmb"):
        assert int(fields[cap], 16) == 0, result.output
    assert fields["NoNewPrivs"].strip() == "1"
    uid = int(fields["Uid"].split()[0])
    assert uid != 0, "tool code runs as root"
    if os.geteuid() != 0:
        assert uid == os.geteuid()
    for escape in ("UMOUNTED", "REMOUNTED", "MOUNTED", "USERNS", "WROTE_USR"):
        assert escape not in result.output
    assert "done" in result.output
    assert not Path("/usr/dm-test").exists()


# ---- network ---------------------------------------------------------------------


def _listener(family=socket.AF_INET, address=("127.0.0.1", 0)):
    server = socket.socket(family, socket.SOCK_STREAM)
    server.bind(address)
    server.listen()
    server.settimeout(0.1)
    return server


def _host_addresses() -> list[str]:
    """This machine's own non-loopback IPv4 addresses (may be none)."""
    out = subprocess.run(["hostname", "-I"], capture_output=True, text=True).stdout.split()
    return [a for a in out if "." in a and not a.startswith("127.")]


async def test_no_route_to_the_host_loopback_its_addresses_or_its_sockets(setup):
    """The Temporal frontend and the LLM endpoint listen on the host's loopback
    (or its addresses); tool code must reach none of them."""
    workspace, sandbox, _ = setup
    tcp = _listener(address=("0.0.0.0", 0))  # reachable from the host at any of its addresses
    port = tcp.getsockname()[1]
    abstract = _listener(socket.AF_UNIX, "\0durable-manus-test-" + str(os.getpid()))
    targets = [("127.0.0.1", port)] + [(a, port) for a in _host_addresses()]
    try:
        out = await python(workspace, sandbox, f"""
import socket
for host, port in {targets!r}:
    s = socket.socket()
    s.settimeout(2)
    try:
        s.connect((host, port))
        print("CONNECTED", host, port)
    except OSError as e:
        print("refused", host, type(e).__name__)
u = socket.socket(socket.AF_UNIX)
try:
    u.connect("\\0durable-manus-test-{os.getpid()}")
    print("CONNECTED abstract")
except OSError as e:
    print("refused abstract", type(e).__name__)
try:
    socket.create_connection(("example.com", 80), timeout=2)
    print("CONNECTED internet")
except OSError as e:
    print("refused internet", type(e).__name__)
""")
        try:
            tcp.accept()
            accepted = True
        except (TimeoutError, socket.timeout):
            accepted = False
    finally:
        tcp.close()
        abstract.close()
    assert "CONNECTED" not in out, out
    assert not accepted
    assert "refused 127.0.0.1" in out and "refused abstract" in out


FETCH = """
import os, urllib.request
for name in ("no_proxy", "NO_PROXY"):  # the forwarder exempts loopback; this test asks the proxy anyway
    os.environ.pop(name, None)
direct = urllib.request.build_opener(urllib.request.ProxyHandler({{}}))
proxied = urllib.request.build_opener(urllib.request.ProxyHandler({{"http": os.environ["HTTP_PROXY"]}}))
for opener, url in [(direct, "http://127.0.0.1:{port}/"), (proxied, "http://127.0.0.1:{port}/"),
                    (proxied, "http://169.254.169.254/latest/meta-data/"), (proxied, "http://10.0.0.1/")]:
    try:
        print(opener.open(url, timeout=5).read().decode())
    except urllib.error.HTTPError as e:
        print(e.code, e.read().decode().strip())
    except OSError as e:
        print("Failed to connect", type(e).__name__)
"""


class _Site(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"hello-from-the-site")

    def log_message(self, *args):
        pass


async def test_opt_in_egress_goes_through_the_proxy_and_never_to_private_addresses(tmp_path):
    """network = "internet": tool code reaches what the proxy allows (here a
    local site the operator allowed explicitly, as tests have no internet), and
    nothing private, link-local or denied, directly or through the proxy."""
    site = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Site)
    threading.Thread(target=site.serve_forever, daemon=True).start()
    port = site.server_address[1]
    root = tmp_path / "root"
    try:
        results = {}
        for allow in ((), (f"http://127.0.0.1:{port}",)):
            sandbox = ToolSandbox.detect(
                "auto", root, network="internet", egress_allow=allow, egress_ports=(80, 443, port)
            )
            require(sandbox.mode == "bwrap", "bubblewrap")
            results[allow] = await python(Workspace(root), sandbox, FETCH.format(port=port))
    finally:
        site.shutdown()
    closed = [line for line in results[()].splitlines() if line.strip()]
    opened = [line for line in results[(f"http://127.0.0.1:{port}",)].splitlines() if line.strip()]
    assert "Failed to connect" in closed[0] and "Failed to connect" in opened[0]  # no direct route, ever
    assert "127.0.0.1 (loopback address) is not allowed" in closed[1]
    assert opened[1] == "hello-from-the-site"
    for lines in (closed, opened):
        assert "169.254.169.254 (link-local address) is not allowed" in lines[2]
        assert "10.0.0.1 (private address) is not allowed" in lines[3]


# ---- resources ---------------------------------------------------------------------


async def test_a_fork_bomb_is_contained(setup):
    workspace, sandbox, _ = setup
    require(sandbox.cgroups is not None and "pids" in sandbox.cgroups.parents, "a writable pids cgroup")
    began = time.monotonic()
    out = await python(workspace, sandbox, """
import os
while True:
    try:
        os.fork()
    except OSError:
        pass
""", timeout=5)
    assert time.monotonic() - began < 20
    assert "timed out after 5 s" in out
    # The worker is unharmed: it can still start processes and threads.
    assert subprocess.run([sys.executable, "-c", "import threading; t = threading.Thread(target=print); t.start(); t.join()"]).returncode == 0
    assert list(sandbox.cgroups.parents["pids"].glob("call-*")) == []


async def test_memory_is_capped_for_all_processes_of_a_call_together(tmp_path):
    """Three children of 300 MB each under a 512 MiB cap: each would pass the
    per-process limit, together they must not."""
    root = tmp_path / "root"
    sandbox = ToolSandbox.detect("auto", root, memory_bytes=512 * 1024**2)
    require(sandbox.mode == "bwrap", "bubblewrap")
    require(sandbox.cgroups is not None and "memory" in sandbox.cgroups.parents, "a writable memory cgroup")
    out = await python(Workspace(root), sandbox, """
import subprocess, sys
hog = "b = bytearray(300 * 1024 * 1024); import time; time.sleep(3); print('kept', len(b))"
children = [subprocess.Popen([sys.executable, "-c", hog]) for _ in range(3)]
print("exits:", sorted(c.wait() for c in children))
""", timeout=30)
    exits = out.split("exits:")[1].split("]")[0] if "exits:" in out else ""
    assert "-9" in exits or "out of memory" in out, out


async def test_bash_keeps_its_directory_and_background_jobs_end_with_the_call(setup):
    workspace, sandbox, _ = setup
    # A mark of this test's own: other processes of the machine may sleep too.
    mark = f"{os.getpid()}{time.monotonic_ns() % 10**6:06d}"
    first = await bash(
        workspace, sandbox, f"mkdir -p sub; cd sub; (sleep 300.{mark} &); setsid sleep 301.{mark} & echo started"
    )
    assert first.cwd.endswith("/run-1/sub"), first
    second = await bash(workspace, sandbox, "pwd", cwd=first.cwd)
    assert second.output.strip().endswith("/run-1/sub")
    # Killed with the call's pid namespace (and cgroup); the kernel may take a
    # moment to tear a killed process down, never the 300 s it would sleep.
    deadline = time.monotonic() + 30  # a generous bound: the sleeps would last 300 s
    while (survivors := subprocess.run(["pgrep", "-f", f"sleep 30[01][.]{mark}"], capture_output=True, text=True).stdout.split()):
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert survivors == [], "background processes outlived the call that started them"


# ---- the worker never follows what the tool controls ----------------------------------


async def test_the_reported_directory_never_leaves_the_run_directory(setup):
    workspace, sandbox, _ = setup
    run_dir = workspace.run_dir("run-1")
    for command in ("cd /etc", "cd /proc/self", "mkdir -p d; ln -sfn /etc d/link; cd d/link"):
        result = await bash(workspace, sandbox, command)
        assert result.cwd is None or Path(result.cwd) == run_dir or run_dir in Path(result.cwd).parents, result
        assert result.cwd != "/etc"
    # A command that floods every descriptor it has, the report channel
    # included: the worker reads a bounded amount and keeps the old directory.
    began = time.monotonic()
    result = await bash(
        workspace, sandbox, "for fd in /proc/self/fd/*; do head -c 3000000 /dev/zero > $fd 2>/dev/null; done; true"
    )
    assert time.monotonic() - began < 20
    assert result.cwd == str(run_dir)


# ---- a frozen worker --------------------------------------------------------------------


FROZEN_WORKER = """
import asyncio, sys
from pathlib import Path
sys.path.insert(0, {repo!r})
from tools.python_execute import PythonExecute
from activities.tools.sandbox import ToolSandbox
from activities.workspace import Workspace
from agent_model.tool_io import ToolRequest
root = Path({root!r})
tool = PythonExecute(Workspace(root), timeout=120, sandbox=ToolSandbox.detect("auto", root))
code = "import time\\nwhile True:\\n    open('ticks', 'a').write(f'{{time.time()}}\\\\n')\\n    time.sleep(0.1)\\n"
asyncio.run(tool.run(ToolRequest(workspace="run-1", arguments={{"code": code}})))
"""


async def test_a_retry_never_runs_beside_an_attempt_whose_worker_froze(setup, tmp_path):
    """The first attempt's worker is SIGSTOPped mid-call (as a Temporal retry
    would then start elsewhere). Its call dies within the lease, and a second
    attempt of the same run waits for it: the two never overlap."""
    workspace, _, _ = setup
    ticks = workspace.run_dir("run-1") / "ticks"
    first = subprocess.Popen(
        [sys.executable, "-c", FROZEN_WORKER.format(repo=str(REPO), root=str(workspace.root))], cwd=REPO
    )
    try:
        for _ in range(200):
            if ticks.exists() and ticks.read_text().count("\n") >= 3:
                break
            await asyncio.sleep(0.05)
        assert ticks.exists(), "the first attempt never started"
        first.send_signal(signal.SIGSTOP)
        frozen_at = time.time()
        sandbox = ToolSandbox.detect("auto", workspace.root)
        out = await python(workspace, sandbox, "import time; print('second', time.time())")
        second_started = float(out.split()[1])
        last_tick = max(float(t) for t in ticks.read_text().split())
    finally:
        first.kill()
        first.wait()
    assert last_tick < second_started, "the retry ran while the first attempt still ran"
    assert last_tick - frozen_at < LEASE_SECONDS + 3, "the frozen worker's call outlived its lease"
    assert second_started - frozen_at < LEASE_SECONDS + 5


# ---- no sandbox: refuse, never run bare ----------------------------------------------------


async def test_without_bubblewrap_the_process_tools_are_refused(tmp_path):
    root = tmp_path / "root"
    sandbox = ToolSandbox.detect("auto", root, bwrap=str(tmp_path / "no-bwrap"))
    assert sandbox.mode == "refused"
    assert "UNAVAILABLE" in sandbox.describe() and "apt-get install bubblewrap" in sandbox.describe()
    workspace = Workspace(root)
    env = ActivityEnvironment()
    py = await env.run(
        PythonExecute(workspace, sandbox=sandbox).run,
        ToolRequest(workspace="run-1", arguments={"code": "open('ran', 'w').write('x')"}),
    )
    sh = await env.run(
        Bash(workspace, sandbox=sandbox).run, ToolRequest(workspace="run-1", arguments={"command": "touch ran"})
    )
    for result in (py, sh):
        assert result.error and "disabled on this worker" in result.output and "bubblewrap" in result.output
    assert not (workspace.run_dir("run-1") / "ran").exists()


def test_strict_mode_stops_a_worker_without_bubblewrap(tmp_path):
    with pytest.raises(SandboxUnavailable, match="bubblewrap"):
        ToolSandbox.detect("bwrap", tmp_path, bwrap=str(tmp_path / "no-bwrap"))


def test_only_the_operator_turns_the_sandbox_off(tmp_path):
    assert ToolSandbox.detect("none", tmp_path).mode == "none"
    assert ToolSandbox().mode == "refused"  # the default is never "unconfined"


def test_an_interpreter_under_tmp_stays_visible(tmp_path, monkeypatch):
    """CI clones the repo (and its venv) under /tmp, which the sandbox replaces
    with a private tmpfs: the interpreter's directories are bound back."""
    import activities.tools.sandbox as sandbox_module

    sandbox = ToolSandbox(mode="bwrap", problem=None, bwrap="/usr/bin/bwrap", workspace_root=tmp_path / "root")
    fake_venv = tmp_path / "venv"
    monkeypatch.setattr(sandbox_module.sys, "prefix", str(fake_venv))
    argv = sandbox.command(["python"], run_dir=tmp_path / "root" / "run", cwd=tmp_path / "root" / "run")
    tmpfs = argv.index("/tmp")
    bound = [argv[i + 1] for i, a in enumerate(argv) if a == "--ro-bind" and i > tmpfs]
    assert str(fake_venv.resolve()) in bound


async def test_secret_files_inside_the_visible_system_are_hidden(tmp_path):
    """A config or TLS key kept under /etc (visible to tools) cannot be read there."""
    root = tmp_path / "root"
    secret = Path("/etc/hostname")
    sandbox = ToolSandbox.detect("auto", root, hidden_files=[secret])
    require(sandbox.mode == "bwrap", "bubblewrap")
    out = await python(Workspace(root), sandbox, f"""
try:
    print("read", repr(open({str(secret)!r}).read()))
except OSError as e:
    print("refused", type(e).__name__)
""")
    assert out.strip() in ("read ''", "refused PermissionError"), out
    visible = await python(Workspace(root), ToolSandbox.detect("auto", root), f"print(len(open({str(secret)!r}).read()))")
    assert visible.strip() != "0", "the file must be readable when not hidden, or the test proves nothing"


def test_workers_on_one_machine_keep_out_of_each_others_cgroups(tmp_path):
    """Another worker's live calls are neither counted nor swept by this one;
    a dead worker's leftovers are swept."""
    from activities.tools.call_cgroup import CallCgroups

    mine = CallCgroups.detect(memory_bytes=512 * 1024**2, max_pids=64)
    require(mine is not None and "pids" in mine.parents, "a writable pids cgroup")
    tools_dir = mine.parents["pids"].parent
    other = subprocess.Popen(["sleep", "30"])
    dead = subprocess.Popen(["true"])
    dead.wait()
    live_call = tools_dir / f"worker-{other.pid}" / "call-live"
    dead_call = tools_dir / f"worker-{dead.pid}" / "call-dead"
    try:
        for call in (live_call, dead_call):
            call.mkdir(parents=True)
        again = CallCgroups.detect(memory_bytes=512 * 1024**2, max_pids=64)
        assert again.parents["pids"] == mine.parents["pids"]
        assert live_call.exists(), "a live worker's call was swept"
        assert not dead_call.parent.exists(), "a dead worker's leftovers stay"
        with again.call() as group:
            assert all(d.parent == mine.parents[c] for d, c in zip(group.dirs, again.parents))
        assert list(mine.parents["pids"].glob("call-*")) == []
    finally:
        other.kill()
        other.wait()
        for call in (live_call, dead_call):
            for d in (call, call.parent):
                with contextlib.suppress(OSError):
                    d.rmdir()


WALK = """
import json, os, subprocess
# find walks it all (a Python walk of /usr takes seconds); every file changed
# since the test began, all it planted, is read.
changed = subprocess.run(
    ["find", TOP, "(", "-path", "/proc", "-o", "-path", "/sys", "-o", "-path", "/dev", ")", "-prune",
     "-o", "-newerct", f"@{SINCE}", "-size", "-64k", "-print0"],
    capture_output=True, timeout=100,
).stdout.split(b"\\0")
found = []
for path in filter(None, changed):
    try:
        with open(path, "rb") as f:
            if MARKER in f.read():
                found.append(path.decode())
    except OSError:
        pass
listed = {d: sorted(os.listdir(d)) if os.path.isdir(d) else None for d in WATCHED}
print(json.dumps({"found": found, "listed": listed}))
"""


async def test_nothing_the_operator_configured_is_readable_by_tool_code(tmp_path, monkeypatch):
    """Tool code walks the whole filesystem it sees and reads every small file:
    no config file, mcp.json (beside the config or named by the variable),
    payload key file, TLS key, server data or repository file of the worker's is among them,
    even when the operator keeps them inside a directory tools see (/etc)."""
    import uuid

    import runtime.worker_factory as worker_factory
    from activities.context_store import ContextStore
    from config.settings import load_settings

    if not os.access("/etc", os.W_OK):
        pytest.skip("the test puts the operator's files under /etc, as an operator would")
    marker = f"operator-secret-{uuid.uuid4().hex}"
    since = time.time() - 1
    etc = Path("/etc") / f"durable-manus-test-{uuid.uuid4().hex[:8]}"
    files = {
        "config.toml": (
            f'[llm]\napi_key = "{marker}-config"\n[tools]\nsandbox = "auto"\n'
            f'[encryption]\nkey_file = "{etc}/keys/payload.json"\n'
        ),
        "keys/payload.json": json.dumps({"current": "k1", "keys": {"k1": f"{marker}-payload-key"}}),
        "mcp.json": json.dumps({"mcpServers": {"a": {"command": "true", "env": {"TOKEN": f"{marker}-beside"}}}}),
        "other/mcp.json": json.dumps(
            {"mcpServers": {"b": {"url": "https://mcp.example/mcp", "headers": {"Authorization": f"Bearer {marker}"}}}}
        ),
        "tls/client.key": f"-----BEGIN PRIVATE KEY-----\n{marker}-key\n",
        "repo/config/notes.txt": f"{marker}-repo",
        "data/temporal.db": f"{marker}-data",
    }
    try:
        for name, text in files.items():
            (etc / name).parent.mkdir(parents=True, exist_ok=True)
            (etc / name).write_text(text)
        monkeypatch.setenv("DURABLE_MANUS_MCP_CONFIG", str(etc / "other" / "mcp.json"))
        monkeypatch.setenv("TEMPORAL_TLS_CLIENT_KEY_PATH", str(etc / "tls" / "client.key"))
        monkeypatch.setenv("DURABLE_MANUS_DATA_DIR", str(etc / "data"))
        monkeypatch.setattr(worker_factory, "REPO_DIR", etc / "repo", raising=False)  # a worker installed under /etc
        settings = load_settings(etc / "config.toml", env={**os.environ, "WORKSPACE_ROOT": str(tmp_path / "ws")})
        sandbox = worker_factory.tool_sandbox(settings)
        require(sandbox.mode == "bwrap", f"bubblewrap ({sandbox.problem})")
        workspace = Workspace(settings.workspace_root)
        (workspace.run_dir("other-run") / "private.txt").write_text(f"{marker}-other-run")
        ContextStore(workspace.root).put(f"{marker}-context".encode(), 32)  # the shared think context
        watched = [str(etc / "repo"), str(etc / "data"), str(REPO), str(workspace.root)]
        code = f"MARKER = {marker.encode()!r}\nWATCHED = {watched!r}\nSINCE = {since!r}\n"
        out = await python(workspace, sandbox, code + "TOP = '/'\n" + WALK, timeout=120)
        # The same code finds them all where nothing hides them, or the test proves nothing.
        plain = ToolSandbox.detect("auto", settings.workspace_root)
        unhidden = await python(workspace, plain, code + f"TOP = {str(etc)!r}\n" + WALK, timeout=120)
    finally:
        shutil.rmtree(etc, ignore_errors=True)
    assert out.startswith("{") and unhidden.startswith("{"), (out, unhidden)
    seen, readable = json.loads(out), json.loads(unhidden)
    assert seen["found"] == [], seen["found"]
    assert seen["listed"][str(etc / "repo")] == [] and seen["listed"][str(etc / "data")] == [], seen["listed"]
    assert seen["listed"][str(workspace.root)] == ["run-1"], seen["listed"]
    assert set(seen["listed"][str(REPO)] or []) <= {".venv"}, seen["listed"]  # at most the interpreter
    assert sorted(readable["found"]) == sorted(str(etc / name) for name in files), readable["found"]



@pytest.mark.parametrize("how", ["named", "through a symlink", "data directory"])
def test_a_worker_whose_operator_files_lie_in_the_workspace_does_not_start(tmp_path, monkeypatch, how):
    """An mcp.json (or the server's data) in a run directory is that run's:
    bash and the editor read and rewrite it whatever the sandbox hides, so
    the worker refuses it."""
    from config.settings import ConfigError
    from runtime.worker_factory import worker_resources
    from testkit.settings import make_settings

    inside = tmp_path / "ws" / "run-1" / "mcp.json"
    inside.parent.mkdir(parents=True)
    inside.write_text(json.dumps({"mcpServers": {"a": {"command": "true", "env": {"TOKEN": "secret"}}}}))
    named = inside
    if how == "through a symlink":
        named = tmp_path / "etc-mcp.json"
        named.symlink_to(inside)
    if how == "data directory":
        monkeypatch.setenv("DURABLE_MANUS_DATA_DIR", str(inside.parent))
    else:
        monkeypatch.setenv("DURABLE_MANUS_MCP_CONFIG", str(named))
    with pytest.raises(ConfigError, match="lies inside the workspace .* move it out of the workspace"):
        worker_resources(make_settings("http://127.0.0.1:9/v1", tmp_path / "ws"))

CGROUP_WORKER = """
import os, sys, time
sys.path.insert(0, {repo!r})
real_pid = os.getpid()
os.getpid = lambda: {pid}  # its pid as its own pid namespace shows it: no process here has it
from activities.tools.call_cgroup import CallCgroups
folder = CallCgroups.detect(memory_bytes=512 * 1024**2, max_pids=64).parents["pids"]
(folder / "call-running").mkdir()
(folder / "run-idle").mkdir()  # the group of a run's sandbox (activities/tools/run_sandbox.py)
if {live}:
    (folder / "call-running" / "cgroup.procs").write_text(str(real_pid))  # a call of its own, running
print(folder, flush=True)
if {live}:
    time.sleep(60)
"""


def test_a_worker_in_another_pid_namespace_keeps_its_cgroups(tmp_path):
    """Workers prove they live by the lock on their folder, not by a pid that
    another pid namespace cannot see: a live worker's folder and the processes
    of its calls survive this worker's sweep; a dead worker's folder goes."""
    from activities.tools.call_cgroup import CallCgroups

    mine = CallCgroups.detect(memory_bytes=512 * 1024**2, max_pids=64)
    require(mine is not None and "pids" in mine.parents, "a writable pids cgroup")
    unseen_pid = int(Path("/proc/sys/kernel/pid_max").read_text()) + 1

    def worker(live: bool) -> subprocess.Popen:
        code = CGROUP_WORKER.format(repo=str(REPO), pid=unseen_pid + (0 if live else 1), live=live)
        return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)

    live = worker(live=True)
    live_folder = dead_folder = tmp_path / "not-made"
    try:
        live_folder = Path(live.stdout.readline().strip())
        assert live_folder.name.startswith(f"worker-{unseen_pid}")
        dead = worker(live=False)  # starts, sweeps, and exits without cleaning up
        dead_folder = Path(dead.stdout.readline().strip())
        assert dead.wait(timeout=30) == 0

        again = CallCgroups.detect(memory_bytes=512 * 1024**2, max_pids=64)  # this worker's sweep

        assert again.parents["pids"] == mine.parents["pids"]
        assert (live_folder / "call-running").is_dir(), "a live worker's call was swept"
        assert (live_folder / "run-idle").is_dir(), "a live worker's run sandbox group was swept"
        assert live.poll() is None, "a live worker's call was killed"
        assert not dead_folder.exists(), "a dead worker's folder stays"
    finally:
        live.kill()
        live.wait()
        for leftover in (
            live_folder / "call-running", live_folder / "run-idle", live_folder,
            dead_folder / "call-running", dead_folder / "run-idle", dead_folder,
        ):
            with contextlib.suppress(OSError):
                leftover.rmdir()


def test_the_interpreter_stays_visible_inside_a_hidden_directory(tmp_path, monkeypatch):
    """A worker installed under /usr with its venv inside: the repository is
    emptied for tools, its interpreter bound back."""
    import activities.tools.sandbox as sandbox_module

    repo = Path("/usr/src/durable-manus")
    monkeypatch.setattr(sandbox_module.sys, "prefix", str(repo / ".venv"))
    sandbox = ToolSandbox(
        mode="bwrap", problem=None, bwrap="/usr/bin/bwrap", workspace_root=tmp_path / "root", hidden_dirs=(repo,)
    )
    argv = sandbox.command(["python"], run_dir=tmp_path / "root" / "run", cwd=tmp_path / "root" / "run")
    emptied = argv.index(str(repo))
    assert argv[emptied - 1] == "--tmpfs"
    bound = [argv[i + 1] for i, a in enumerate(argv) if a == "--ro-bind" and i > emptied]
    assert str(repo / ".venv") in bound
