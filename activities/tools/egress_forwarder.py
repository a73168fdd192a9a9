"""Runs inside the tool sandbox: exposes the worker's egress proxy (a UNIX
socket bind-mounted into the sandbox) as an HTTP proxy on 127.0.0.1:PORT,
then runs a command with the proxy variables pointing there.

    python3 -I -S egress_forwarder.py PORT UNIX_SOCKET_PATH -- COMMAND [ARG...]

PORT 0 picks a free port. The command starts only once the listener is
ready, inherits stdin, stdout, stderr and every other inheritable descriptor
untouched, and gets HTTP_PROXY, HTTPS_PROXY (both spellings) set to the
listener and NO_PROXY extended with the loopback names, so servers it starts
itself on 127.0.0.1 stay reachable directly. The forwarder exits with the
command's status, or dies of the same signal.

Exit 125: the forwarder itself failed (usage, cannot listen); 126/127: the
command cannot be run / was not found.

Standard library only, and only light modules: it starts before every tool
command, so its start-up time is paid on every call.
"""

import os
import selectors
import signal
import socket
import sys

TYPE_CHECKING = False  # set by type checkers only: importing typing would add to every call's start-up
if TYPE_CHECKING:
    from typing import NoReturn

CHUNK = 64 * 1024
MAX_RELAYS = 64
"""Connections relayed at once: each takes two descriptors, and the sandbox
allows the forwarder few."""
FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")


def fail(message: str, status: int = 125) -> "NoReturn":
    sys.stderr.write(f"egress_forwarder: {message}\n")
    sys.stderr.flush()
    os._exit(status)


def listen(port):
    """Listening sockets on 127.0.0.1 and, when the kernel has IPv6, ::1 on
    the same port. Python sockets are close-on-exec, so the command does not
    inherit them."""
    v4 = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    v4.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    v4.bind(("127.0.0.1", port))
    v4.listen(128)
    port = v4.getsockname()[1]
    sockets = [v4]
    try:
        v6 = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        v6.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        v6.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        v6.bind(("::1", port))
        v6.listen(128)
        sockets.append(v6)
    except OSError:
        pass
    for s in sockets:
        s.setblocking(False)
    return sockets, port


def child_environment(port):
    env = dict(os.environ)
    proxy = f"http://127.0.0.1:{port}"
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
        env[name] = proxy
    existing = [e.strip() for e in (env.get("NO_PROXY") or env.get("no_proxy") or "").split(",") if e.strip()]
    no_proxy = ",".join(dict.fromkeys([*LOOPBACK_NAMES, *existing]))
    env["NO_PROXY"] = env["no_proxy"] = no_proxy
    return env


class Relay:
    """Copies bytes between an accepted TCP connection and a connection to the
    proxy's UNIX socket, passing half-closes on. A direction reads only when
    its previous chunk is fully written, so a slow reader slows the writer."""

    def __init__(self, selector, client, upstream, on_close):
        self.selector = selector
        self.sockets = (client, upstream)
        self.pending = [b"", b""]  # pending[i]: read from sockets[i], not yet written to the other
        self.eof = [False, False]  # sockets[i] has sent its end
        self.shut = [False, False]  # sockets[i]'s write side was shut down
        self.events = [0, 0]
        self.on_close = on_close
        self.closed = False
        self.update()

    def handle(self, side, events):
        try:
            if events & selectors.EVENT_READ and not self.eof[side] and not self.pending[side]:
                data = self.sockets[side].recv(CHUNK)
                if data:
                    self.pending[side] = data
                else:
                    self.eof[side] = True
                self.flush(side)
            if events & selectors.EVENT_WRITE:
                self.flush(1 - side)
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:
            self.close()
            return
        if all(self.eof) and not any(self.pending):
            self.close()
        else:
            self.update()

    def flush(self, side):
        """Write what was read from sockets[side] to the other socket."""
        other = 1 - side
        if self.pending[side]:
            try:
                sent = self.sockets[other].send(self.pending[side])
            except (BlockingIOError, InterruptedError):
                sent = 0
            self.pending[side] = self.pending[side][sent:]
        if self.eof[side] and not self.pending[side] and not self.shut[other]:
            self.shut[other] = True
            self.sockets[other].shutdown(socket.SHUT_WR)

    def update(self):
        for side in (0, 1):
            wanted = 0
            if not self.eof[side] and not self.pending[side]:
                wanted |= selectors.EVENT_READ
            if self.pending[1 - side]:
                wanted |= selectors.EVENT_WRITE
            if wanted == self.events[side]:
                continue
            sock = self.sockets[side]
            if not self.events[side]:
                self.selector.register(sock, wanted, (self, side))
            elif not wanted:
                self.selector.unregister(sock)
            else:
                self.selector.modify(sock, wanted, (self, side))
            self.events[side] = wanted

    def close(self):
        if self.closed:
            return
        self.closed = True
        for side, sock in enumerate(self.sockets):
            if self.events[side]:
                self.selector.unregister(sock)
            sock.close()
        self.on_close(self)


def main(argv):
    try:
        separator = argv.index("--")
        port_text, socket_path = argv[1:separator]
        port = int(port_text)
        command = argv[separator + 1:]
        if not command or not 0 <= port < 65536:
            raise ValueError
    except ValueError:
        fail("usage: egress_forwarder.py PORT UNIX_SOCKET_PATH -- COMMAND [ARG...]")

    try:
        listeners, port = listen(port)
    except OSError as e:
        fail(f"cannot listen on 127.0.0.1 port {port}: {e}")

    selector = selectors.DefaultSelector()
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_read, False)
    os.set_blocking(wake_write, False)
    selector.register(wake_read, selectors.EVENT_READ, "wake")
    # A signal writes a byte to the pipe, so select() returns and the loop
    # notices the command's exit at once.
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    child = None
    early_signals = []

    def forward(signum, frame):
        if child is None:
            early_signals.append(signum)
        else:
            try:
                os.kill(child, signum)
            except ProcessLookupError:
                pass

    for signum in FORWARDED_SIGNALS:
        signal.signal(signum, forward)

    try:
        # Python ignores SIGPIPE and SIGXFSZ for itself; the command must get
        # the default behaviour, as it would without the forwarder.
        child = os.posix_spawnp(
            command[0], command, child_environment(port),
            setsigdef=(signal.SIGPIPE, signal.SIGXFSZ),
        )
    except FileNotFoundError as e:
        fail(f"{command[0]}: {e.strerror}", 127)
    except OSError as e:
        fail(f"{command[0]}: {e.strerror}", 126)
    for signum in early_signals:
        os.kill(child, signum)

    relays = set()
    accepting = [True]

    def set_accepting(on):
        if on == accepting[0]:
            return
        accepting[0] = on
        for listener in listeners:
            if on:
                selector.register(listener, selectors.EVENT_READ, "listen")
            else:
                selector.unregister(listener)

    def relay_closed(relay):
        relays.discard(relay)
        set_accepting(True)

    for listener in listeners:
        selector.register(listener, selectors.EVENT_READ, "listen")

    while True:
        pid, status = os.waitpid(child, os.WNOHANG)
        if pid:
            break
        for key, events in selector.select():
            if key.data == "wake":
                try:
                    while os.read(wake_read, 512):
                        pass
                except BlockingIOError:
                    pass
            elif key.data == "listen":
                if accepting[0]:
                    accept(key.fileobj, socket_path, selector, relays, relay_closed, set_accepting)
            else:
                relay, side = key.data
                if not relay.closed:
                    relay.handle(side, events)

    exit_like(status)


def accept(listener, socket_path, selector, relays, relay_closed, set_accepting):
    try:
        client, _ = listener.accept()
    except (BlockingIOError, InterruptedError, ConnectionAbortedError):
        return
    except OSError:  # out of descriptors: stop accepting until a relay ends
        if relays:
            set_accepting(False)
        return
    client.setblocking(False)
    client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    except OSError:
        client.close()
        return
    upstream.setblocking(False)
    try:
        upstream.connect(socket_path)
    except OSError:
        # No proxy, or its backlog is full: the client sees the connection
        # closed rather than the whole relay loop waiting.
        upstream.close()
        client.close()
        return
    relays.add(Relay(selector, client, upstream, relay_closed))
    if len(relays) >= MAX_RELAYS:
        set_accepting(False)


def exit_like(status):
    """Exit as the command did: same code, or death by the same signal."""
    sys.stdout.flush()
    sys.stderr.flush()
    if os.WIFSIGNALED(status):
        signum = os.WTERMSIG(status)
        if os.WCOREDUMP(status) or signum in (signal.SIGSEGV, signal.SIGABRT, signal.SIGBUS, signal.SIGILL,
                                              signal.SIGFPE, signal.SIGQUIT, signal.SIGTRAP, signal.SIGSYS):
            # The command's crash is its own; no core file of the forwarder
            # should land in the run directory.
            import resource
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        signal.set_wakeup_fd(-1)
        try:
            signal.signal(signum, signal.SIG_DFL)
        except (OSError, ValueError):  # SIGKILL, SIGSTOP: always default
            pass
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [signum])
        os.kill(os.getpid(), signum)
        os._exit(128 + signum)
    os._exit(os.waitstatus_to_exitcode(status))


if __name__ == "__main__":
    main(sys.argv)
