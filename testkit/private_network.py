"""Run a command in a network namespace of its own, where 127.0.0.1:7233 and
:8233 are free whatever this machine runs, optionally with other programs
holding ports there first.

    python -m testkit.private_network [--hold PORT]... -- COMMAND...

`--hold PORT` binds and listens on 127.0.0.1:PORT before COMMAND starts, and
accepts connections without ever answering (a program that is not Temporal).
An embedded server that COMMAND started ($DURABLE_MANUS_DATA_DIR/temporal.pid,
which must be set) is killed when it ends, so the namespace goes with it. Needs `unshare -n`
(root, or user namespaces): private_network_available() says.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

REPO_DIR = Path(__file__).resolve().parent.parent


def private_network_available() -> bool:
    if not shutil.which("unshare") or not shutil.which("ip"):
        return False
    probe = subprocess.run(["unshare", "-n", "true"], capture_output=True)
    return probe.returncode == 0


def run_in_private_network(
    command: Sequence[str], env: Mapping[str, str], hold: Sequence[int] = (), timeout: float = 120
) -> subprocess.CompletedProcess:
    """`command` run to its end in a namespace of its own, output captured."""
    holds = [argument for port in hold for argument in ("--hold", str(port))]
    return subprocess.run(
        ["unshare", "-n", sys.executable, "-m", "testkit.private_network", *holds, "--", *command],
        cwd=REPO_DIR, env=dict(env), capture_output=True, text=True, timeout=timeout,
    )


def _hold(port: int) -> socket.socket:
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(64)
    accepted: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            accepted.append(connection)  # held open, never answered

    threading.Thread(target=accept, daemon=True).start()
    return listener


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hold", type=int, action="append", default=[])
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    listeners = [_hold(port) for port in args.hold]
    try:
        return subprocess.run(command).returncode
    finally:
        data = os.environ.get("DURABLE_MANUS_DATA_DIR")  # never the repo's own .data: its server is not ours
        with contextlib.suppress(OSError, ValueError, TypeError):
            os.killpg(int((Path(data) / "temporal.pid").read_text()), signal.SIGKILL)  # type: ignore[arg-type]
        for listener in listeners:
            listener.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
