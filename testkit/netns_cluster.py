"""A three-host cluster in network namespaces, for partition tests:

    srv   the Temporal dev server, on a bridge that carries the test's own /24
    wa    worker.py "a", on a veth into the bridge
    wb    worker.py "b", likewise
    (root) the test itself and its fake LLM, on a fourth veth into the bridge

`cut("a")` detaches a's veth peer from the bridge: a's packets go nowhere, no
RST, both carriers stay up, a keeps running (a silent partition: this machine
has neither tc netem nor a packet filter). `heal("a")` attaches it again. A cut
worker loses the LLM too, as a cut-off host would.

All workers share one workspace directory (same kernel, so flock holds across
the namespaces). Names, interfaces and the subnet are unique to the cluster;
everything (processes in the namespaces, namespaces, links) is removed on exit,
on failure, on Ctrl-C, and at interpreter exit if the exit path was skipped.

    async with NetnsCluster(tmp_path, responder=script) as cluster:
        a = cluster.start_worker("a")
        ...
        cluster.cut("a")
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import ipaddress
import os
import random
import shutil
import signal
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from temporalio.client import Client

from runtime.embedded_server import start_dev_server_command
from testkit.e2e import Child, child_env, start_worker
from testkit.fake_openai import FakeOpenAI, Responder

BRIDGE = "br0"
BRIDGE_MAC = "02:00:00:00:00:01"
"""Locally administered; the bridge lives in a namespace of its own, so it cannot clash."""
SERVER_PORT = 7233
SERVER_START_SECONDS = 60.0
"""The dev server answers in 2-5 s; a loaded 2-core machine can take much longer."""
WORKERS = ("a", "b")


def available() -> bool:
    """Whether this machine can build the cluster: root and `ip netns`."""
    if os.geteuid() != 0 or not shutil.which("ip"):
        return False
    probe = f"dmprobe{uuid.uuid4().hex[:6]}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True).returncode == 0
    if made:
        subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return made


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")


def _free_subnet() -> ipaddress.IPv4Network:
    """A random 10.x.y.0/24 that no route of this machine overlaps."""
    routes = subprocess.run(["ip", "-4", "route", "show", "table", "all"], capture_output=True, text=True).stdout
    taken = []
    for line in routes.splitlines():
        word = line.split()[0] if line.split() else ""
        with contextlib.suppress(ValueError):
            if word not in ("default", "local", "broadcast"):
                taken.append(ipaddress.ip_network(word, strict=False))
    for _ in range(200):
        net = ipaddress.ip_network(f"10.{random.randint(100, 250)}.{random.randint(0, 255)}.0/24")
        if not any(net.overlaps(t) for t in taken):
            return net
    raise RuntimeError("no free 10.x.y.0/24 subnet")


@dataclass
class Host:
    role: str
    """"srv", "a", "b" or "driver" (the root namespace)."""
    netns: str | None
    """The namespace's name; None for the root namespace."""
    address: str
    peer: str
    """Its veth's end on the bridge (in srv); the bridge itself for srv."""
    inode: int = 0
    """The namespace's inode (what /proc/self/ns/net names), to tell which host a process ran on."""

    @property
    def exec_prefix(self) -> list[str]:
        return ["ip", "netns", "exec", self.netns] if self.netns else []


class NetnsCluster:
    def __init__(self, base_dir: Path, responder: Responder, task_queue: str | None = None) -> None:
        self.base_dir = base_dir
        self.tag = uuid.uuid4().hex[:6]
        self.task_queue = task_queue or f"partition-{self.tag}"
        self.workspace = base_dir / "workspace"
        self.responder = responder
        self.hosts: dict[str, Host] = {}
        self.srv_netns = ""
        self.workers: dict[str, Child] = {}
        self.server: subprocess.Popen | None = None
        self.fake: FakeOpenAI | None = None
        self.client: Client | None = None
        self.cuts: dict[str, float] = {}
        """role -> time.time() of its last cut."""
        self._torn_down = False

    # ---- lifecycle ------------------------------------------------------------------

    async def __aenter__(self) -> "NetnsCluster":
        atexit.register(self.teardown)
        try:
            self._build_network()
            self._start_server()
            self.fake = FakeOpenAI(responder=self.responder, host=self.hosts["driver"].address).start()
            self.client = await self._connect()
        except BaseException:
            self.teardown()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.teardown()

    def teardown(self) -> None:
        """Idempotent: every process in the namespaces, the namespaces, the driver's link, the fake."""
        if self._torn_down:
            return
        self._torn_down = True
        for child in self.workers.values():
            child.kill()
        if self.server is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.server.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.server.wait(timeout=10)
        for host in self.hosts.values():
            if host.netns:
                self._kill_everything_in(host.netns)
        for host in self.hosts.values():
            if host.netns:
                subprocess.run(["ip", "netns", "del", host.netns], capture_output=True)
        subprocess.run(["ip", "link", "del", self._root_link], capture_output=True)
        if self.fake is not None:
            self.fake.stop()
        atexit.unregister(self.teardown)

    @staticmethod
    def _kill_everything_in(netns: str) -> None:
        """All processes still in the namespace (tool processes lead sessions of their own): all ours."""
        pids = subprocess.run(["ip", "netns", "pids", netns], capture_output=True, text=True).stdout.split()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid), signal.SIGKILL)

    # ---- the network ----------------------------------------------------------------

    @property
    def _root_link(self) -> str:
        return f"dm{self.tag}d"

    def _build_network(self) -> None:
        net = _free_subnet()
        addresses = list(net.hosts())
        prefix = f"dm-{self.tag}"
        srv = Host("srv", f"{prefix}-srv", str(addresses[0]), BRIDGE)
        self.hosts["srv"] = srv
        self.srv_netns = f"{prefix}-srv"
        _ip("netns", "add", self.srv_netns)
        _ip("-n", self.srv_netns, "link", "set", "lo", "up")
        # A bridge takes the lowest MAC of its ports unless given one: a cut would change
        # the server's MAC under the other hosts' ARP caches and cut them off too.
        _ip("-n", self.srv_netns, "link", "add", BRIDGE, "address", BRIDGE_MAC, "type", "bridge")
        _ip("-n", self.srv_netns, "addr", "add", f"{srv.address}/24", "dev", BRIDGE)
        _ip("-n", self.srv_netns, "link", "set", BRIDGE, "up")
        for index, role in enumerate(WORKERS, start=10):
            netns = f"{prefix}-w{role}"
            self.hosts[role] = host = Host(role, netns, str(addresses[index]), f"p{role}")
            _ip("netns", "add", netns)
            _ip("-n", netns, "link", "set", "lo", "up")
            self._veth(f"dm{self.tag}{role}", host, inner_name="eth0")
        driver = Host("driver", None, str(addresses[1]), "pdriver")
        self.hosts["driver"] = driver
        self._veth(self._root_link, driver, inner_name=None)
        for host in self.hosts.values():
            host.inode = os.stat(f"/run/netns/{host.netns}").st_ino if host.netns else os.stat("/proc/self/ns/net").st_ino

    def _veth(self, name: str, host: Host, inner_name: str | None) -> None:
        """A veth pair: `name` ends up in host's namespace (renamed inner_name), its peer on the bridge."""
        srv = self.srv_netns
        temporary_peer = f"{name}p"
        _ip("link", "add", name, "type", "veth", "peer", "name", temporary_peer)
        _ip("link", "set", temporary_peer, "netns", srv)
        _ip("-n", srv, "link", "set", temporary_peer, "name", host.peer)
        _ip("-n", srv, "link", "set", host.peer, "master", BRIDGE, "up")
        if host.netns:
            _ip("link", "set", name, "netns", host.netns)
            _ip("-n", host.netns, "link", "set", name, "name", inner_name or name)
            _ip("-n", host.netns, "addr", "add", f"{host.address}/24", "dev", inner_name or name)
            _ip("-n", host.netns, "link", "set", inner_name or name, "up")
        else:
            _ip("addr", "add", f"{host.address}/24", "dev", name)
            _ip("link", "set", name, "up")

    def cut(self, role: str) -> float:
        """Detach the host's link from the bridge (its packets go nowhere); returns time.time() of the cut."""
        _ip("-n", self.srv_netns, "link", "set", self.hosts[role].peer, "nomaster")
        self.cuts[role] = time.time()
        return self.cuts[role]

    def heal(self, role: str) -> float:
        """Attach the host's link to the bridge again; returns time.time() of the heal."""
        _ip("-n", self.srv_netns, "link", "set", self.hosts[role].peer, "master", BRIDGE)
        return time.time()

    def role_of_inode(self, inode: int) -> str:
        return next((h.role for h in self.hosts.values() if h.inode == inode), f"?{inode}")

    def role_of_address(self, address: str) -> str:
        return next((h.role for h in self.hosts.values() if h.address == address), f"?{address}")

    # ---- processes ------------------------------------------------------------------

    @property
    def server_address(self) -> str:
        return f"{self.hosts['srv'].address}:{SERVER_PORT}"

    def _start_server(self) -> None:
        srv = self.hosts["srv"]
        log_dir = self.base_dir / "logs"
        log_dir.mkdir(parents=True, exist_ok=True)
        argv = start_dev_server_command(self.base_dir / "temporal.db", port=SERVER_PORT, ui_port=8233)
        at = argv.index("--ip")
        # The dev server's own services dial each other on 127.0.0.1 whatever --ip says: listen on
        # every address of the server's namespace (its lo and the bridge, nothing else).
        argv[at + 1] = "0.0.0.0"
        argv.append("--headless")
        with open(log_dir / "temporal.out", "wb") as out:
            self.server = subprocess.Popen(
                [*srv.exec_prefix, *argv], stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    async def _connect(self) -> Client:
        deadline = time.monotonic() + SERVER_START_SECONDS
        while True:
            if self.server is not None and self.server.poll() is not None:
                log = (self.base_dir / "logs" / "temporal.out").read_text(errors="replace")
                raise RuntimeError(f"the dev server exited ({self.server.returncode}):\n{log[-3000:]}")
            try:
                client = await Client.connect(self.server_address)
                await client.count_workflows()  # the search attributes are registered by now
                return client
            except Exception:
                if time.monotonic() >= deadline:
                    raise
                await asyncio.sleep(0.3)

    def start_worker(self, role: str, extra: dict[str, str] | None = None) -> Child:
        """worker.py on host `role`, on the cluster's task queue and shared workspace."""
        assert self.fake is not None
        home = self.base_dir / f"worker-{role}"
        env = child_env(
            home, address=self.server_address, task_queue=self.task_queue, base_url=self.fake.base_url,
            workspace_root=self.workspace, extra=extra,
        )
        for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
            env.pop(name, None)  # the test network has no proxy
        child = start_worker(env, home / "logs", name=f"worker-{role}", prefix=self.hosts[role].exec_prefix)
        self.workers[role] = child
        return child
