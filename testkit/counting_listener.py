"""A port that counts the connections it accepts, on every address of this
host (a service bound to 0.0.0.0 and ::, as an LLM server or a Web UI often
is); and this host's addresses as `ip` lists them, to aim at."""

from __future__ import annotations

import contextlib
import ipaddress
import shutil
import socket
import subprocess
import threading


class ConnectionCounter:
    """Accepts and closes connections on `port` (0: a free one), counting them."""

    def __init__(self, port: int = 0) -> None:
        try:
            self._socket = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
            self._socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            self._socket.bind(("::", port))
        except OSError:  # no IPv6 here
            self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self._socket.bind(("0.0.0.0", port))
        self._socket.listen(64)
        self.port = self._socket.getsockname()[1]
        self.connections = 0
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self._socket.accept()
            except OSError:  # closed by stop()
                return
            self.connections += 1
            connection.close()

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            self._socket.shutdown(socket.SHUT_RDWR)
        self._socket.close()
        self._thread.join(5)


def addresses_from_ip() -> list[str]:
    """This host's addresses that `ip -o addr` lists, link-local ones left
    out (a URL cannot name their interface); [] without the `ip` command."""
    if shutil.which("ip") is None:
        return []
    listing = subprocess.run(["ip", "-o", "addr"], capture_output=True, text=True, timeout=10).stdout
    found = []
    for line in listing.splitlines():
        fields = line.split()
        if len(fields) > 3 and fields[2] in ("inet", "inet6"):
            address = ipaddress.ip_address(fields[3].split("/")[0])
            if not address.is_link_local:
                found.append(str(address))
    return found


def url_host(address: str) -> str:
    return f"[{address}]" if ":" in address else address
