"""Whether an address can be listened on, asked before any server or worker
is started, so a taken port is one line at once rather than a failure later."""

from __future__ import annotations

import socket


def listen_problem(host: str, port: int) -> OSError | None:
    """The error a listener on host:port would get now (taken, not this machine's), or None."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(address)
    except OSError as e:
        return e
    return None
