"""The egress proxy (activities/tools/egress_proxy.py) and the forwarder that
exposes it inside the sandbox (activities/tools/egress_forwarder.py).

Every server here listens on 127.0.0.1 and no test sends a packet elsewhere:
names like "ten.test" resolve, through the proxy's injected resolver, to
private or link-local addresses, and the proxy must refuse them before
connecting -- which the recording connector checks.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import textwrap
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from activities.tools import egress_forwarder
from activities.tools.egress_proxy import EgressPolicy, EgressProxy, open_tcp

FORWARDER = Path(egress_forwarder.__file__)

pytestmark = pytest.mark.timeout(30)


class Origin(BaseHTTPRequestHandler):
    """Answers every GET with its path; keeps the request heads it saw."""

    seen: list[dict[str, str]] = []

    def do_GET(self) -> None:
        Origin.seen.append({k.lower(): v for k, v in self.headers.items()})
        body = f"hello from origin {self.path}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def origin():
    Origin.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Origin)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


@pytest.fixture
async def echo():
    """A raw TCP echo server on 127.0.0.1 that closes its side after the
    client has closed its own."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    yield server.sockets[0].getsockname()[1]
    server.close()


@pytest.fixture
def sock_dir():
    # UNIX socket paths are limited to ~107 bytes; pytest's tmp_path can be longer.
    path = Path(tempfile.mkdtemp(prefix="egress-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


class Recorder:
    """Resolver and connector for the proxy: names resolve from a table, and
    every connection the proxy opens is noted before it is made."""

    def __init__(self, table: dict[str, list[str]]) -> None:
        self.table = table
        self.resolved: list[str] = []
        self.connected: list[tuple[str, int]] = []

    async def resolve(self, host: str) -> list[str]:
        self.resolved.append(host)
        if host not in self.table:
            raise socket.gaierror(socket.EAI_NONAME, "unknown test host")
        return self.table[host]

    async def connect(self, address: str, port: int):
        self.connected.append((address, port))
        return await open_tcp(address, port)


NAMES = {
    "origin.test": ["127.0.0.1"],
    "ten.test": ["10.0.0.5"],
    "docker.test": ["172.18.0.3"],
    "lan.test": ["192.168.1.1"],
    "metadata.test": ["169.254.169.254"],
    "cgnat.test": ["100.64.0.1"],
    "ula.test": ["fd00::1"],
    "mapped.test": ["::ffff:127.0.0.1"],
    "zero.test": ["0.0.0.0"],
    "nat64.test": ["64:ff9b::a00:5"],
    "sixtofour.test": ["2002:a00:5::1"],
    "multicast.test": ["224.0.0.251"],
    # One public and one private answer: the private one must still refuse.
    "mixed.test": ["93.184.216.34", "10.0.0.5"],
    "two.test": ["127.0.0.2", "127.0.0.1"],
}


@pytest.fixture
async def start_proxy(sock_dir):
    proxies: list[EgressProxy] = []

    async def start(**options) -> tuple[EgressProxy, Recorder]:
        recorder = Recorder(NAMES)
        proxy = EgressProxy(resolver=recorder.resolve, connector=recorder.connect, **options)
        await proxy.start(sock_dir / f"proxy{len(proxies)}.sock")
        proxies.append(proxy)
        return proxy, recorder

    yield start
    for proxy in proxies:
        await proxy.close()


async def ask(proxy: EgressProxy, request: bytes, timeout: float = 10.0) -> tuple[int, bytes]:
    """Send one raw request to the proxy's socket; the status and everything
    the proxy sent until it closed the connection."""
    reader, writer = await asyncio.open_unix_connection(proxy.socket_path)
    reply = b""
    try:
        writer.write(request)
        async with asyncio.timeout(timeout):
            while chunk := await reader.read(65536):
                reply += chunk
    except ConnectionResetError:  # the proxy closed with our request unread
        pass
    finally:
        writer.close()
    status = int(reply.split(b" ", 2)[1]) if reply.startswith(b"HTTP/") else 0
    return status, reply


async def forward(proxy_socket: str, command: list[str], *, input: bytes | None = None, **options):
    """Run `command` under the forwarder; (exit code, stdout, stderr). The
    event loop stays free to serve the proxy meanwhile."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-I", "-S", str(FORWARDER), "0", proxy_socket, "--", *command,
        stdin=subprocess.DEVNULL if input is None else subprocess.PIPE,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, **options,
    )
    out, err = await asyncio.wait_for(process.communicate(input), 20)
    return process.returncode, out.decode(), err.decode()


def python(code: str) -> list[str]:
    return [sys.executable, "-I", "-c", textwrap.dedent(code)]


async def test_plain_http_through_the_forwarder(start_proxy, origin):
    proxy, recorder = await start_proxy(allow=(f"127.0.0.1 ports {origin}",))
    code, out, err = await forward(proxy.socket_path, python(f"""
        import os, urllib.request
        print(os.environ["HTTP_PROXY"].startswith("http://127.0.0.1:"))
        reply = urllib.request.urlopen("http://origin.test:{origin}/hello?x=1", timeout=10)
        print(reply.status, reply.read().decode(), reply.headers["Connection"])
    """))
    assert (code, err) == (0, "")
    assert out.splitlines() == ["True", "200 hello from origin /hello?x=1 close"]
    assert recorder.resolved == ["origin.test"]  # once: the checked answer is the one used
    assert recorder.connected == [("127.0.0.1", origin)]
    [head] = Origin.seen
    assert head["host"] == f"origin.test:{origin}"
    assert head["connection"] == "close"
    assert "proxy-connection" not in head


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
async def test_curl_uses_the_forwarder_and_shows_refusals(start_proxy, origin):
    proxy, recorder = await start_proxy(allow=(f"127.0.0.1 ports {origin}",))
    code, out, _ = await forward(proxy.socket_path, [
        "sh", "-c", f"curl -sS http://origin.test:{origin}/curl; echo; curl -sS http://metadata.test/latest/",
    ])
    assert code == 0
    assert out.splitlines() == [
        "hello from origin /curl",
        "egress to metadata.test, which resolves to 169.254.169.254 (link-local address) is not allowed",
    ]
    assert recorder.connected == [("127.0.0.1", origin)]


async def test_connect_tunnel_through_the_forwarder(start_proxy, echo):
    proxy, recorder = await start_proxy(allow=(f"127.0.0.1 ports {echo}",))
    code, out, err = await forward(proxy.socket_path, python(f"""
        import os, socket
        port = int(os.environ["HTTPS_PROXY"].rsplit(":", 1)[1])
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.sendall(b"CONNECT origin.test:{echo} HTTP/1.1\\r\\nHost: origin.test:{echo}\\r\\n\\r\\n")
        head = b""
        while not head.endswith(b"\\r\\n\\r\\n"):
            head += s.recv(1)
        print(head.decode().splitlines()[0])
        s.sendall(b"ping " * 50000)
        s.shutdown(socket.SHUT_WR)  # the echo server closes once it sees the end
        received = b""
        while chunk := s.recv(65536):
            received += chunk
        print(received == b"ping " * 50000)
    """))
    assert (code, err) == (0, "")
    assert out.splitlines() == ["HTTP/1.1 200 Connection established", "True"]
    assert recorder.connected == [("127.0.0.1", echo)]


@pytest.mark.parametrize(
    ("request_line", "reason"),
    [
        ("CONNECT 127.0.0.1:443", "egress to 127.0.0.1 (loopback address) is not allowed"),
        ("CONNECT [::1]:443", "egress to ::1 (loopback address) is not allowed"),
        ("CONNECT localhost:443", "egress to localhost (local host name) is not allowed"),
        ("GET http://LocalHost./", "egress to localhost (local host name) is not allowed"),
        ("CONNECT api.localhost:443", "egress to api.localhost (local host name) is not allowed"),
        ("CONNECT 10.1.2.3:443", "egress to 10.1.2.3 (private address) is not allowed"),
        ("CONNECT ten.test:443", "resolves to 10.0.0.5 (private address)"),
        ("CONNECT docker.test:443", "resolves to 172.18.0.3 (private address)"),
        ("CONNECT lan.test:443", "resolves to 192.168.1.1 (private address)"),
        ("GET http://metadata.test/latest/meta-data/", "resolves to 169.254.169.254 (link-local address)"),
        ("CONNECT 169.254.169.254:80", "(link-local address)"),
        ("CONNECT cgnat.test:443", "resolves to 100.64.0.1 (shared address (carrier-grade NAT))"),
        ("CONNECT ula.test:443", "resolves to fd00::1 (private address)"),
        ("CONNECT mapped.test:443", "resolves to ::ffff:127.0.0.1 (loopback address 127.0.0.1 in IPv6 form)"),
        ("CONNECT [::ffff:127.0.0.1]:443", "(loopback address 127.0.0.1 in IPv6 form)"),
        ("CONNECT [::ffff:a00:5]:443", "(private address 10.0.0.5 in IPv6 form)"),
        ("CONNECT 0.0.0.0:443", "egress to 0.0.0.0 (unspecified address) is not allowed"),
        ("CONNECT zero.test:443", "resolves to 0.0.0.0 (unspecified address)"),
        ("CONNECT nat64.test:443", "(private address 10.0.0.5 in IPv6 form)"),
        ("CONNECT sixtofour.test:443", "(private address 10.0.0.5 in IPv6 form)"),
        ("CONNECT multicast.test:443", "(multicast address)"),
        ("CONNECT mixed.test:443", "resolves to 10.0.0.5 (private address)"),
    ],
)
async def test_non_public_destinations_are_refused_before_connecting(start_proxy, request_line, reason):
    proxy, recorder = await start_proxy()
    status, reply = await ask(proxy, f"{request_line} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    assert status == 403
    head, _, body = reply.partition(b"\r\n\r\n")
    assert b"Connection: close" in head
    assert reason in body.decode()
    assert body.decode().count("\n") == 1
    assert recorder.connected == []


async def test_ports_outside_the_set_are_refused_unresolved(start_proxy, origin):
    proxy, recorder = await start_proxy(allow=("127.0.0.1 ports 80",))
    status, reply = await ask(proxy, b"CONNECT origin.test:22 HTTP/1.1\r\n\r\n")
    assert status == 403
    assert b"egress to port 22 is not allowed (allowed ports: 80, 443)" in reply
    status, _ = await ask(proxy, f"GET http://origin.test:{origin}/ HTTP/1.1\r\n\r\n".encode())
    assert status == 403
    assert (recorder.resolved, recorder.connected) == ([], [])


async def test_allow_list_by_origin_and_the_control_plane(start_proxy, origin):
    proxy, recorder = await start_proxy(allow=(f"http://origin.test:{origin}",))
    status, reply = await ask(proxy, f"GET http://origin.test:{origin}/named HTTP/1.0\r\n\r\n".encode())
    assert status == 200 and reply.endswith(b"hello from origin /named")
    # The name is allowed, not its address under another name.
    status, _ = await ask(proxy, f"GET http://127.0.0.1:{origin}/ HTTP/1.1\r\n\r\n".encode())
    assert status == 403

    # The control plane is refused whatever the allow list opens, under any name.
    proxy, recorder = await start_proxy(allow=(f"127.0.0.0/8 ports {origin}",), deny=[("127.0.0.1", origin)])
    for request_line in (f"GET http://origin.test:{origin}/", f"CONNECT 127.0.0.2:{origin}", f"CONNECT [::ffff:127.0.0.1]:{origin}"):
        status, reply = await ask(proxy, f"{request_line} HTTP/1.1\r\n\r\n".encode())
        assert status == 403 and b"part of the agent's control plane" in reply, request_line
    assert recorder.connected == []


async def test_numeric_host_spellings_are_checked_after_resolution(sock_dir):
    # The system resolver reads these as IPv4 numbers; AI_NUMERICHOST proves it
    # would do so without asking DNS, so no query leaves the machine.
    spellings = []
    for spelling in ("127.1", "2130706433", "0x7f.0.0.1", "0177.0.0.1", "10.0.5"):
        try:
            socket.getaddrinfo(spelling, None, flags=socket.AI_NUMERICHOST)
        except socket.gaierror:
            continue
        spellings.append(spelling)
    if not spellings:
        pytest.skip("this C library reads no shorthand IPv4 spellings")
    connected = []

    async def connect(address: str, port: int):
        connected.append(address)
        return await open_tcp(address, port)

    proxy = EgressProxy(connector=connect)
    await proxy.start(sock_dir / "numeric.sock")
    try:
        for spelling in spellings:
            status, reply = await ask(proxy, f"CONNECT {spelling}:443 HTTP/1.1\r\n\r\n".encode())
            assert status == 403, spelling
            assert b"(loopback address)" in reply or b"(private address)" in reply
    finally:
        await proxy.close()
    assert connected == []


async def test_next_address_is_tried_when_one_does_not_answer(start_proxy, origin):
    proxy, recorder = await start_proxy(allow=(f"127.0.0.0/8 ports {origin}",))
    status, reply = await ask(proxy, f"GET http://two.test:{origin}/second HTTP/1.1\r\n\r\n".encode())
    assert status == 200 and reply.endswith(b"hello from origin /second")
    assert recorder.connected == [("127.0.0.2", origin), ("127.0.0.1", origin)]


async def test_bad_requests_get_400(start_proxy):
    proxy, recorder = await start_proxy(allow=("127.0.0.1 ports 80",))
    for request in [
        b"GET / HTTP/1.1\r\nHost: origin.test\r\n\r\n",  # origin form: not a proxy request
        b"GET https://origin.test/ HTTP/1.1\r\n\r\n",
        b"CONNECT origin.test HTTP/1.1\r\n\r\n",  # no port
        b"CONNECT bad_host!:443 HTTP/1.1\r\n\r\n",
        b"GET http://origin.test/ HTTP/1.1\r\nBad Header: x\r\n\r\n",
        b"nonsense\r\n\r\n",
    ]:
        status, _ = await ask(proxy, request)
        assert status == 400, request
    assert recorder.connected == []


async def test_oversized_request_head_is_refused_and_closed(start_proxy):
    proxy, recorder = await start_proxy(allow=("127.0.0.1 ports 80",), max_header_bytes=4096)
    one_long_line = b"GET http://origin.test/ HTTP/1.1\r\nX-Big: " + b"a" * 10000 + b"\r\n\r\n"
    many_lines = b"GET http://origin.test/ HTTP/1.1\r\n" + b"X-Small: aaaaaaaaaa\r\n" * 400 + b"\r\n"
    for request in (one_long_line, many_lines):
        status, reply = await ask(proxy, request)  # returns only once the proxy has closed
        assert status == 431, reply[:100]
    assert recorder.connected == []


async def test_client_that_never_finishes_its_head_is_dropped(start_proxy):
    proxy, _ = await start_proxy(header_timeout=0.3)
    loop = asyncio.get_running_loop()
    started = loop.time()
    status, reply = await ask(proxy, b"CONNECT origin.te", timeout=5)
    assert status == 408
    status, reply = await ask(proxy, b"", timeout=5)
    assert status == 408
    assert loop.time() - started < 3
    assert proxy.active_connections == 0


async def test_connections_beyond_the_limit_are_turned_away(start_proxy):
    proxy, _ = await start_proxy(max_connections=2, header_timeout=20)
    idle = [await asyncio.open_unix_connection(proxy.socket_path) for _ in range(2)]
    for _ in range(50):
        if proxy.active_connections == 2:
            break
        await asyncio.sleep(0.02)
    status, reply = await ask(proxy, b"CONNECT origin.test:443 HTTP/1.1\r\n\r\n")
    assert status == 503
    for _, writer in idle:
        writer.close()


async def test_idle_tunnel_is_closed(start_proxy, echo):
    proxy, _ = await start_proxy(allow=(f"127.0.0.1 ports {echo}",), idle_timeout=0.3)
    reader, writer = await asyncio.open_unix_connection(proxy.socket_path)
    writer.write(f"CONNECT origin.test:{echo} HTTP/1.1\r\n\r\n".encode())
    assert await reader.readuntil(b"\r\n\r\n") == b"HTTP/1.1 200 Connection established\r\n\r\n"
    writer.write(b"still here")
    assert await reader.readexactly(10) == b"still here"
    assert await asyncio.wait_for(reader.read(), 5) == b""  # closed by the proxy, not by us
    writer.close()


async def test_close_cuts_open_tunnels_and_removes_the_socket(start_proxy, echo):
    proxy, _ = await start_proxy(allow=(f"127.0.0.1 ports {echo}",))
    assert stat.S_IMODE(os.stat(proxy.socket_path).st_mode) == 0o666  # the sandbox user connects
    reader, writer = await asyncio.open_unix_connection(proxy.socket_path)
    writer.write(f"CONNECT origin.test:{echo} HTTP/1.1\r\n\r\n".encode())
    await reader.readuntil(b"\r\n\r\n")
    await proxy.close()
    assert await asyncio.wait_for(reader.read(), 5) == b""
    assert not os.path.exists(proxy.socket_path)
    writer.close()


def test_policy_lets_public_addresses_and_allowed_origins_through():
    policy = EgressPolicy(allow=("192.168.5.0/24 ports 80,8080", "http://Mirror.LAN.:3142"))
    assert policy.address_refusal("example.test", 443, ["93.184.216.34", "2606:2800:220:1::1"]) is None
    assert policy.address_refusal("mirror", 8080, ["192.168.5.20"]) is None
    assert policy.address_refusal("mirror.lan", 3142, ["10.9.9.9"]) is None
    assert policy.name_refusal("mirror.lan", 3142) is None
    # An entry opens its ports, not the host.
    assert "private address" in policy.address_refusal("mirror", 22, ["192.168.5.20"])
    assert "private address" in policy.address_refusal("mirror.lan", 80, ["10.9.9.9"])
    assert "private address" in policy.address_refusal("other", 80, ["192.168.6.1"])
    with pytest.raises(ValueError, match="neither a network nor a host name|not an allow entry"):
        EgressPolicy(allow=("not a host!",))


@pytest.mark.parametrize("entry, words", [
    ("127.0.0.1", 'names no port: an entry opens ports, never a whole host; write an origin such as "http://127.0.0.1:8000"'),
    ("10.0.0.0/8", 'never a whole network; write "10.0.0.0/8 ports 80,443"'),
    ("mirror.lan", '"http://mirror.lan:8000", or "mirror.lan ports 80,443"'),
    ("ftp://mirror.lan", "is not an http(s) origin"),
    ("http://mirror.lan/packages", "is not an origin (scheme://host:port, no path, user or query)"),
    ("http://mirror.lan:0", "ports are 1 to 65535"),
])
def test_an_allow_entry_without_ports_is_refused(entry, words):
    with pytest.raises(ValueError, match=re.escape(words)):
        EgressPolicy(allow=(entry,))


async def test_forwarder_exits_like_its_command(sock_dir):
    missing = str(sock_dir / "no-proxy.sock")
    assert (await forward(missing, python("import sys; sys.exit(7)")))[0] == 7
    assert (await forward(missing, python("import os, signal; os.kill(os.getpid(), signal.SIGTERM)")))[0] == -15
    code, _, err = await forward(missing, ["no-such-command-here"])
    assert code == 127 and "no-such-command-here" in err
    code, _, err = await forward(missing, [])
    assert code == 125 and "usage" in err


async def test_forwarder_passes_termination_on_to_its_command(sock_dir):
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-I", "-S", str(FORWARDER), "0", str(sock_dir / "no-proxy.sock"), "--",
        *python("""
            import signal, sys, time
            signal.signal(signal.SIGTERM, lambda *_: sys.exit(3))
            print("ready", flush=True)
            time.sleep(20)
        """),
        stdout=subprocess.PIPE,
    )
    assert await asyncio.wait_for(process.stdout.readline(), 10) == b"ready\n"
    process.terminate()
    assert await asyncio.wait_for(process.wait(), 10) == 3


async def test_forwarder_passes_descriptors_but_not_its_listeners(sock_dir):
    read_end, write_end = os.pipe()
    try:
        code, out, err = await forward(
            str(sock_dir / "no-proxy.sock"),
            python(f"""
                import os, sys
                links = []
                for fd in os.listdir("/proc/self/fd"):
                    try:
                        links.append(os.readlink(f"/proc/self/fd/{{fd}}"))
                    except FileNotFoundError:  # listdir's own descriptor, closed by now
                        pass
                print([link for link in links if link.startswith("socket:")])
                os.write({write_end}, b"through fd {write_end}")
                print(sys.stdin.read())
            """),
            input=b"from stdin", pass_fds=(write_end,),
        )
    finally:
        os.close(write_end)
    assert (code, err) == (0, "")
    assert out.splitlines() == ["[]", "from stdin"]
    assert os.read(read_end, 100) == f"through fd {write_end}".encode()
    os.close(read_end)
