"""Where this machine's `mcp-server --http` servers (and run pages, `ui`) listen,
written down for the workers and the starter.

Our own MCP server starts runs and reads every run's steps: it is part of the
agent's control plane (runtime/control_plane.py), yet it listens on a port no
config names. Each HTTP server writes its address to the data directory while
it serves, and a worker started afterwards on this machine refuses it to web
paths and tool code. A worker on another host, or one that was already
running, does not see the file: list the address in `[web] control_plane`
there (docs/mcp.md). The run page (runtime/run_page/) writes its address
the same way, under its own directory, with the Temporal server and
namespace it shows, so that the starter can link a run it starts to it.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from activities.process_liveness import is_alive
from runtime.embedded_server import data_dir, private_data_dir

RECORD_DIR = "mcp-http"
"""Under the data directory: one file per serving process, named by its pid."""
PAGE_RECORD_DIR = "run-page"
"""The same for run pages."""
RECORDS_READ = 32
"""Files read at most: the directory is the worker's user's own, but a bound costs nothing."""
RECORD_BYTES = 512


@contextlib.contextmanager
def recorded_while_serving(
    host: str, port: int, kind: str = RECORD_DIR, details: dict[str, str] | None = None
) -> Iterator[Path]:
    """Write this process's address (and short `details`) down under the
    directory `kind` for as long as the block runs."""
    directory = private_data_dir() / kind
    directory.mkdir(exist_ok=True, mode=0o700)
    _forget_dead(directory)
    path = directory / f"{os.getpid()}.json"
    with contextlib.suppress(FileNotFoundError):
        path.unlink()  # whatever is there: a FIFO would make the write wait for a reader
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600), "w") as file:
        json.dump({**(details or {}), "host": host, "port": port}, file)
    try:
        yield path
    finally:
        with contextlib.suppress(OSError):
            path.unlink()


def recorded_addresses(kind: str = RECORD_DIR) -> list[tuple[str, int]]:
    """(host, port) of the MCP servers (or the run pages) that wrote themselves
    down here and still run; a file that is not one this module wrote (a link,
    a FIFO, bad JSON) names none."""
    return [(record["host"], record["port"]) for record in recorded(kind)]


def recorded(kind: str = RECORD_DIR) -> list[dict]:
    """The records (host, port and details) of the servers of `kind` that still run."""
    directory = data_dir() / kind
    try:
        names = sorted(entry.name for entry in os.scandir(directory) if entry.name.endswith(".json"))[:RECORDS_READ]
    except OSError:
        return []
    records = []
    for name in names:
        pid = name.removesuffix(".json")
        if not pid.isdigit() or not is_alive(int(pid)):
            continue  # killed, or stopped by a signal its HTTP server re-raised, before it could remove its file
        record = _read(directory / name)
        if record is not None:
            records.append(record)
    return records


def _read(path: Path) -> dict | None:
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        with open(descriptor, "rb") as file:
            if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
                return None
            record = json.loads(file.read(RECORD_BYTES))
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict):
        return None
    host, port = record.get("host"), record.get("port")
    if not isinstance(host, str) or not 0 < len(host) <= 255 or type(port) is not int or not 0 < port < 65536:
        return None
    return {name: value for name, value in record.items() if isinstance(value, (str, int))}


def _forget_dead(directory: Path) -> None:
    """Remove the files of servers that are gone (killed before they could)."""
    for entry in os.scandir(directory):
        pid = entry.name.removesuffix(".json")
        if pid.isdigit() and int(pid) != os.getpid() and not is_alive(int(pid)):
            with contextlib.suppress(OSError):
                os.unlink(entry.path)

