"""The agent's control plane (the Temporal frontend, its HTTP API and Web UI,
every [llm.*] endpoint, the MCP servers, the worker's metrics) is out of
reach of web_fetch and of tool egress: under every spelling of its
addresses, on every address of this host, even where an allow entry opens
its ports; and an address of this host is never taken for the public
internet. Every destination here is a real listener that counts the
connections it gets (testkit/counting_listener.py).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from activities.tools.egress_proxy import EgressProxy
from activities.tools.own_host import own_host_addresses
from activities.web.access import WebAccess
from activities.web.fetch import fetch_page
from config.mcp_config import McpServerSettings
from config.settings import WebSettings
from runtime.control_plane import TEMPORAL_HTTP_PORT, control_plane
from runtime.embedded_server import PORTS_FILE, UI_PORT, embedded_server_ports, start_dev_server_command
from runtime.mcp_http_record import RECORD_DIR, recorded_addresses, recorded_while_serving
from runtime.worker_factory import web_access
from testkit.counting_listener import ConnectionCounter, addresses_from_ip, url_host
from testkit.e2e import free_port
from testkit.settings import make_settings

REPO = Path(__file__).resolve().parent.parent

SPELLINGS = [
    "127.0.0.1", "2130706433", "127.1", "0177.0.0.1", "0x7f.0.0.1", "0x7f000001", "127.0.0.1.", "127.0.0.2",
    "[::ffff:127.0.0.1]", "[::ffff:7f00:1]", "[::1]", "0.0.0.0", "[::]",
]
"""The loopback and unspecified addresses, as URLs may spell them."""

KINDS = {
    "llm": "the LLM endpoint of [llm]",
    "vision": "the LLM endpoint of [llm.vision]",
    "frontend": "the Temporal frontend",
    "http_api": "a [web] control_plane endpoint",
    "ui": "the Temporal Web UI",
    "metrics": "the worker's metrics",
    "mcp": "the MCP server 'tools'",
}


@pytest.fixture
def plane(tmp_path, monkeypatch):
    """Settings whose control plane is one counting listener per kind, with an
    allow list that opens every one of their ports (and one more, `other`)."""
    listeners = {kind: ConnectionCounter() for kind in (*KINDS, "other")}
    port = {kind: listener.port for kind, listener in listeners.items()}
    monkeypatch.setenv("TEMPORAL_ADDRESS", f"127.0.0.1:{port['frontend']}")
    monkeypatch.setenv("TEMPORAL_UI_URL", f"http://localhost:{port['ui']}")
    monkeypatch.setenv("DURABLE_MANUS_METRICS", f"0.0.0.0:{port['metrics']}")
    settings = make_settings(f"http://127.0.0.1:{port['llm']}/v1", tmp_path)
    vision = settings.llm["default"].model_copy(update={"base_url": f"http://localhost:{port['vision']}/v1"})
    ports = ",".join(str(p) for p in port.values())
    opened = (f"127.0.0.0/8 ports {ports}", f"::1 ports {ports}", f"0.0.0.0 ports {ports}", f"0x7f000001 ports {ports}")
    opened += tuple(f"{address} ports {ports}" for address in addresses_from_ip())
    settings = settings.model_copy(update={
        "llm": {**settings.llm, "vision": vision},
        "web": WebSettings(allow=opened, control_plane=(f"127.0.0.1:{port['http_api']}",)),
        "tool_egress_allow": opened,
        "mcp_servers": {"tools": McpServerSettings(kind="http", url=f"http://127.0.0.1:{port['mcp']}/mcp")},
    })
    yield settings, listeners
    for listener in listeners.values():
        listener.stop()


def hosts_of_this_machine() -> list[str]:
    return SPELLINGS + [url_host(a) for a in addresses_from_ip()]


async def test_web_fetch_reaches_no_control_plane_port_under_any_spelling(plane):
    settings, listeners = plane
    access = web_access(settings)
    for kind, what in KINDS.items():
        for host in hosts_of_this_machine():
            url = f"http://{host}:{listeners[kind].port}/"
            result = await fetch_page(access, url, 1000)
            assert result.error and f"is {what}, part of the agent's control plane" in result.output, (url, result.output)
    assert {kind: listeners[kind].connections for kind in KINDS} == dict.fromkeys(KINDS, 0)
    # The same spellings of an opened port that is no endpoint do connect
    # (or, where the HTTP client cannot read the spelling, are refused in one line).
    for host in ("2130706433", "0x7f.1", "[::ffff:127.0.0.1]"):
        await fetch_page(access, f"http://{host}:{listeners['other'].port}/", 1000)
    assert listeners["other"].connections == 3
    octal = await fetch_page(access, f"http://0177.0.0.1:{listeners['other'].port}/", 1000)
    assert octal.error and "is not a URL the HTTP client accepts" in octal.output


async def ask_proxy(port: int, request: str) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(f"{request} HTTP/1.1\r\n\r\n".encode())
        return await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()


async def test_tool_egress_reaches_no_control_plane_port_under_any_spelling(plane):
    settings, listeners = plane
    # As a tool call's proxy is made (activities/tools/process.py) from the
    # worker's sandbox settings (runtime/worker_factory.py tool_sandbox).
    proxy = EgressProxy(allow=settings.tool_egress_allow, deny=control_plane(settings).endpoints)
    proxy_port = await proxy.start_tcp()
    try:
        for kind, what in KINDS.items():
            for host in hosts_of_this_machine():
                for request in (f"CONNECT {host}:{listeners[kind].port}", f"GET http://{host}:{listeners[kind].port}/"):
                    reply = await ask_proxy(proxy_port, request)
                    assert reply.startswith(b"HTTP/1.1 403") and f"is {what}".encode() in reply, (request, reply)
        reply = await ask_proxy(proxy_port, f"CONNECT 0x7f.1:{listeners['other'].port}")
        assert reply.startswith(b"HTTP/1.1 200")
    finally:
        await proxy.close()
    assert {kind: listeners[kind].connections for kind in KINDS} == dict.fromkeys(KINDS, 0)
    assert listeners["other"].connections == 1


async def test_the_embedded_server_s_ports_are_refused_even_when_opened(tmp_path, monkeypatch):
    # The embedded server's HTTP API and metrics ports are chosen free at its
    # start and written to its data directory, where the rules read them.
    monkeypatch.delenv("TEMPORAL_ADDRESS", raising=False)
    monkeypatch.setenv("DURABLE_MANUS_DATA_DIR", str(tmp_path / "data"))
    (tmp_path / "data").mkdir()
    http_port, metrics_port = free_port(), free_port()
    (tmp_path / "data" / PORTS_FILE).write_text(json.dumps({"http": http_port, "metrics": metrics_port}))
    assert embedded_server_ports() == {"http": http_port, "metrics": metrics_port}
    ports = [7233, TEMPORAL_HTTP_PORT, UI_PORT, http_port, metrics_port]
    settings = make_settings("http://127.0.0.1:1/v1", tmp_path).model_copy(
        update={"web": WebSettings(allow=(f"127.0.0.0/8 ports {','.join(map(str, ports))}",))}
    )
    access = web_access(settings)
    for port, what in (
        (7233, "the Temporal frontend"),
        (TEMPORAL_HTTP_PORT, "the Temporal HTTP API"),
        (UI_PORT, "the embedded Temporal server's Web UI"),
        (http_port, "the embedded Temporal server's HTTP API"),
        (metrics_port, "the embedded Temporal server's metrics"),
    ):
        result = await fetch_page(access, f"http://127.1:{port}/api/v1/namespaces", 1000)
        assert result.error and f"is {what}, part of the agent's control plane" in result.output


async def test_this_machines_mcp_http_server_is_refused_while_it_serves(tmp_path, monkeypatch):
    # Our own MCP server listens on a port no config names; while it serves,
    # a worker started on this machine refuses it even where an allow entry
    # opens it, and once it is gone its port is an ordinary one again.
    monkeypatch.setenv("DURABLE_MANUS_DATA_DIR", str(tmp_path / "data"))
    listener = ConnectionCounter()
    settings = make_settings("http://127.0.0.1:1/v1", tmp_path).model_copy(
        update={"web": WebSettings(allow=(f"127.0.0.0/8 ports {listener.port}",))}
    )
    url = f"http://127.1:{listener.port}/mcp"
    try:
        with recorded_while_serving("0.0.0.0", listener.port):
            assert recorded_addresses() == [("0.0.0.0", listener.port)]
            result = await fetch_page(web_access(settings), url, 1000)
            assert result.error and "is this project's MCP server (mcp-server --http)" in result.output
            assert listener.connections == 0
        assert recorded_addresses() == []
        await fetch_page(web_access(settings), url, 1000)
        assert listener.connections == 1
    finally:
        listener.stop()


def test_recorded_mcp_addresses_that_are_not_ours_name_none(tmp_path, monkeypatch):
    monkeypatch.setenv("DURABLE_MANUS_DATA_DIR", str(tmp_path))
    records = tmp_path / RECORD_DIR
    records.mkdir()
    this = records / f"{os.getpid()}.json"  # a live process's name: read
    for text in ("", "[1]", '{"host": "h", "port": "80"}', '{"host": "", "port": 80}', '{"port": 99999, "host": "h"}'):
        this.write_text(text)
        assert recorded_addresses() == []
    this.unlink()
    os.mkfifo(this)
    assert recorded_addresses() == []  # returns at once: no wait on the FIFO
    this.unlink()
    (tmp_path / "elsewhere.json").write_text('{"host": "127.0.0.1", "port": 40001}')
    this.symlink_to(tmp_path / "elsewhere.json")
    assert recorded_addresses() == []
    this.unlink()
    this.write_text('{"host": "127.0.0.1", "port": 40001}')
    assert recorded_addresses() == [("127.0.0.1", 40001)]


def test_a_killed_servers_record_names_nothing_and_the_next_server_removes_it(tmp_path, monkeypatch):
    monkeypatch.setenv("DURABLE_MANUS_DATA_DIR", str(tmp_path))
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    (tmp_path / RECORD_DIR).mkdir(parents=True)
    stale = tmp_path / RECORD_DIR / f"{gone.pid}.json"
    stale.write_text('{"host": "127.0.0.1", "port": 40002}')
    assert recorded_addresses() == []
    with recorded_while_serving("127.0.0.1", 40003):
        assert recorded_addresses() == [("127.0.0.1", 40003)]
        assert not stale.exists()


def test_a_ports_file_that_is_not_the_servers_names_no_port(tmp_path, monkeypatch):
    monkeypatch.setenv("DURABLE_MANUS_DATA_DIR", str(tmp_path))
    for text in ("", "[7243]", '{"http": "7243", "metrics": 0, "ui": 1}', '{"http": 99999}', "{" * 5000):
        (tmp_path / PORTS_FILE).write_text(text)
        assert embedded_server_ports() == {}


def test_a_ports_file_that_is_a_fifo_or_a_link_is_read_at_once_as_none(tmp_path, monkeypatch):
    monkeypatch.setenv("DURABLE_MANUS_DATA_DIR", str(tmp_path))
    os.mkfifo(tmp_path / PORTS_FILE)
    assert embedded_server_ports() == {}  # returns: no wait for a writer
    (tmp_path / PORTS_FILE).unlink()
    (tmp_path / "elsewhere.json").write_text('{"http": 40001}')
    (tmp_path / PORTS_FILE).symlink_to(tmp_path / "elsewhere.json")
    assert embedded_server_ports() == {}


def test_the_embedded_server_is_started_on_the_ports_it_wrote_down(tmp_path):
    command = start_dev_server_command(tmp_path / "t.db", http_port=40001, metrics_port=40002)
    assert command[command.index("--http-port") + 1] == "40001"
    assert command[command.index("--metrics-port") + 1] == "40002"


def test_every_address_of_this_host_is_known():
    listed = addresses_from_ip()
    if not listed:
        pytest.skip("the ip command (iproute2) is not installed")
    known = {str(a) for a in own_host_addresses()}
    assert set(listed) <= known and "127.0.0.1" in known



def link_local_addresses_with_zones() -> list[tuple[str, str, int]]:
    """(address, interface, index) of this host's link-local IPv6 addresses."""
    if shutil.which("ip") is None:
        return []
    listing = subprocess.run(["ip", "-o", "-6", "addr"], capture_output=True, text=True, timeout=10).stdout
    return [
        (fields[3].split("/")[0], fields[1], int(fields[0].rstrip(":")))
        for fields in (line.split() for line in listing.splitlines())
        if len(fields) > 3 and fields[3].startswith("fe80:")
    ]


async def test_a_link_local_address_of_this_host_with_its_zone_is_this_host():
    """fe80::x%eth0 is fe80::x: a LAN range opened on a port opens neither a
    control-plane endpoint nor another service of this host under it."""
    found = link_local_addresses_with_zones()
    if not found:
        pytest.skip("no link-local IPv6 address here")
    llm, service = ConnectionCounter(), ConnectionCounter()
    opened = [f"fe80::/10 ports {llm.port},{service.port}"]
    access = WebAccess(allow=opened, control_plane=[("127.0.0.1", llm.port)])
    proxy = EgressProxy(allow=opened, deny=[("127.0.0.1", llm.port)])
    proxy_port = await proxy.start_tcp()
    try:
        for address, interface, index in found:
            for zoned in (f"{address}%{interface}", f"{address}%{index}"):
                for port in (llm.port, service.port):
                    fetched = await fetch_page(access, f"http://[{zoned}]:{port}/", 1000)
                    assert fetched.error and "refused" in fetched.output, fetched.output
                    reply = await ask_proxy(proxy_port, f"CONNECT [{zoned}]:{port}")
                    assert reply.startswith(b"HTTP/1.1 403"), reply
    finally:
        await proxy.close()
        llm.stop()
        service.stop()
    assert (llm.connections, service.connections) == (0, 0)

# ---- an address of this host that looks public --------------------------------------

IN_NAMESPACE = textwrap.dedent('''
    import asyncio, json, subprocess, sys
    sys.path.insert(0, sys.argv[1])
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    for address in ("93.184.215.14/32", "10.9.0.5/24"):  # public-looking, and on a LAN
        subprocess.run(["ip", "addr", "add", address, "dev", "lo"], check=True)

    from activities.tools.egress_proxy import EgressProxy
    from activities.web.fetch import fetch_page
    from config.settings import WebSettings
    from runtime.control_plane import control_plane
    from runtime.worker_factory import web_access
    from testkit.counting_listener import ConnectionCounter
    from testkit.settings import make_settings

    async def ask(port, request):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(f"{request} HTTP/1.1\\r\\n\\r\\n".encode())
        try:
            return (await asyncio.wait_for(reader.read(), 10)).decode().splitlines()[0]
        finally:
            writer.close()

    async def main():
        llm, service, lan = ConnectionCounter(), ConnectionCounter(80), ConnectionCounter(8080)
        settings = make_settings(f"http://127.0.0.1:{llm.port}/v1", sys.argv[2])
        access = web_access(settings)
        out = {"fetch": {}, "egress": {}}
        for url in (f"http://93.184.215.14:{llm.port}/v1/models", "http://93.184.215.14/"):
            out["fetch"][url] = (await fetch_page(access, url, 1000)).output
        lan_only = web_access(settings.model_copy(update={"web": WebSettings(allow=("10.9.0.0/24 ports 8080",))}))
        out["fetch"]["lan"] = (await fetch_page(lan_only, "http://10.9.0.5:8080/", 1000)).output
        proxy = EgressProxy(deny=control_plane(settings).endpoints)
        port = await proxy.start_tcp()
        for request in ("CONNECT 93.184.215.14:80", "GET http://93.184.215.14/", "CONNECT 93.184.215.14:443"):
            out["egress"][request] = await ask(port, request)
        await proxy.close()
        out["refused"] = {"llm": llm.connections, "service": service.connections, "lan": lan.connections}
        opened = web_access(settings.model_copy(update={"web": WebSettings(allow=("http://10.9.0.5:8080",))}))
        await fetch_page(opened, "http://10.9.0.5:8080/", 1000)  # an origin naming the address opens it
        out["opened"] = lan.connections
        print(json.dumps(out))

    asyncio.run(main())
''')


def namespace_command() -> list[str] | None:
    """unshare into a network namespace of our own, or None where we cannot."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return None
    command = ["unshare", "--net"] if os.geteuid() == 0 else ["unshare", "--net", "--map-root-user"]
    probe = subprocess.run([*command, "true"], capture_output=True, timeout=30)
    return command if probe.returncode == 0 else None


def test_an_address_of_this_host_is_never_the_public_internet(tmp_path):
    command = namespace_command()
    if command is None:
        pytest.skip("no private network namespace here (unshare, ip)")
    run = subprocess.run(
        [*command, sys.executable, "-c", IN_NAMESPACE, str(REPO), str(tmp_path)],
        capture_output=True, text=True, timeout=120, cwd=REPO,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.splitlines()[-1])
    fetched = list(out["fetch"].values())
    assert "is the LLM endpoint of [llm], part of the agent's control plane" in fetched[0]
    assert "web access to 93.184.215.14 (an address of this host) is not allowed" in fetched[1]
    assert "web access to 10.9.0.5 (an address of this host) is not allowed" in out["fetch"]["lan"]
    for request, status in out["egress"].items():
        assert status.startswith("HTTP/1.1 403"), (request, status)
    assert out["refused"] == {"llm": 0, "service": 0, "lan": 0}
    assert out["opened"] == 1
