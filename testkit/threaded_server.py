"""A stdlib HTTP server of the tests, served from a daemon thread."""

from __future__ import annotations

import threading
from socketserver import BaseServer
from typing import TypeVar

Server = TypeVar("Server", bound=BaseServer)


def serve_in_thread(server: Server) -> Server:
    """`server`, answering from now on (a thread per request, none outliving the tests)."""
    server.daemon_threads = True  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    return server


def stop_serving(server: BaseServer | None) -> None:
    if server is not None:
        server.shutdown()
        server.server_close()
