"""The worker a starter starts for its runs as a process of its own, so that
the runs go on when the starter stops.

It is `python worker.py --idle-exit N` (every security property of a worker
is worker.py's own), started in its own session like the embedded server,
its output appended to a 0600 log file in the data directory. It exits by
itself once no run is open on its task queue for N seconds
(runtime/idle_exit.py). One runs per server, namespace and task queue: a
starter that finds one alive reuses it, and a lock file keeps two starters
from starting two at the same moment.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Awaitable, Callable

from config import environment
from config.config_file import REPO_DIR
from config.settings import Settings
from runtime.embedded_server import data_dir, private_data_dir
from runtime.user_errors import WorkerUnavailable

DEFAULT_IDLE_EXIT = 300.0
"""Seconds a detached worker stays with no open run on its task queue."""
READY_WAIT = 60.0
"""Seconds a starter waits for the worker it started to poll its task queue."""
LOG_TAIL = 4096


def idle_exit_seconds() -> float:
    """$DURABLE_MANUS_WORKER_IDLE_EXIT, else DEFAULT_IDLE_EXIT; 0 means that a
    starter runs its worker in its own process instead (it stops with the command)."""
    value = environment.read(os.environ, "DURABLE_MANUS_WORKER_IDLE_EXIT")
    return DEFAULT_IDLE_EXIT if value is None else value


@dataclass(frozen=True)
class DetachedWorker:
    pid: int
    log_path: Path

    def alive(self) -> bool:
        return worker_process_alive(self.pid)

    def last_log_line(self) -> str:
        try:
            with open(self.log_path, "rb") as log:
                log.seek(max(0, log.seek(0, os.SEEK_END) - LOG_TAIL))
                lines = [line.strip() for line in log.read().decode("utf-8", "replace").splitlines() if line.strip()]
        except OSError:
            return ""
        return lines[-1][:300] if lines else ""

    def where(self) -> str:
        return f"worker {self.pid} (log {self.log_path})"


def worker_process_alive(pid: int) -> bool:
    """True when `pid` runs a worker.py started by a starter (not a zombie, not a reused pid)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (OSError, IndexError):
        return False
    return stat[0] != "Z" and any(a.endswith(b"worker.py") for a in argv) and b"--idle-exit" in argv


def file_stem(address: str, namespace: str, task_queue: str) -> str:
    """worker-<queue>-<hash>: the queue readable, the hash telling servers and namespaces apart."""
    digest = hashlib.sha256(f"{address}\0{namespace}\0{task_queue}".encode()).hexdigest()[:8]
    readable = re.sub(r"[^A-Za-z0-9_.-]", "_", task_queue)[:60]
    return f"worker-{readable}-{digest}"


def _recorded(pid_path: Path) -> DetachedWorker | None:
    try:
        fd = os.open(pid_path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with open(fd, "rb") as file:
            record = json.loads(file.read(4096))
        worker = DetachedWorker(int(record["pid"]), Path(str(record["log"])))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return worker if worker.alive() else None


def _spawn(settings: Settings, directory: Path, stem: str, idle_seconds: float) -> DetachedWorker:
    log_path = directory / f"{stem}.log"
    log = open(os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600), "ab")
    config = settings.config_file
    argv = [sys.executable, str(REPO_DIR / "worker.py"), "--idle-exit", f"{idle_seconds:g}"]
    if config is not None:
        argv += ["--config", str(config.resolve())]
    env = {**os.environ, "TEMPORAL_TASK_QUEUE": settings.task_queue, "PYTHONUNBUFFERED": "1"}
    with log:
        process = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env,
        )
    pid_path = directory / f"{stem}.pid"
    with contextlib.suppress(FileNotFoundError):
        pid_path.unlink()
    with open(os.open(pid_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600), "w") as file:
        json.dump({"pid": process.pid, "log": str(log_path)}, file)
    return DetachedWorker(process.pid, log_path)


@contextlib.contextmanager
def _queue_lock(path: Path, say: Callable[[str], None]):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say("another starter is starting the worker for this task queue; waiting for it...")
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


async def ensure_detached_worker(
    settings: Settings,
    address: str,
    namespace: str,
    is_polling: Callable[[int], Awaitable[bool]],
    idle_seconds: float,
    say: Callable[[str], None],
) -> tuple[DetachedWorker, bool]:
    """The detached worker of this server, namespace and task queue, started
    unless one runs; True when this call started it. Returns once it polls
    (`is_polling(pid)`), or raises WorkerUnavailable with its log's last line
    when it exits first."""
    directory = private_data_dir()
    stem = file_stem(address, namespace, settings.task_queue)
    with _queue_lock(directory / f"{stem}.lock", say):  # held until it polls: a second starter then reuses it
        worker = _recorded(directory / f"{stem}.pid")
        started = worker is None
        if worker is None:
            worker = _spawn(settings, directory, stem, idle_seconds)
        deadline = time.monotonic() + READY_WAIT
        while not await is_polling(worker.pid):
            if not worker.alive():
                said = worker.last_log_line() or "(nothing in its log)"
                raise WorkerUnavailable(f"the worker started for this run exited at start: {said} (its log: {worker.log_path})")
            if time.monotonic() > deadline:
                raise WorkerUnavailable(
                    f"the worker started for this run (pid {worker.pid}) does not poll its task queue after "
                    f"{READY_WAIT:.0f} s; its log: {worker.log_path}"
                )
            await asyncio.sleep(0.2)
    return worker, started


def recorded_worker(settings: Settings, address: str, namespace: str) -> DetachedWorker | None:
    """The detached worker of this server, namespace and task queue, when one runs."""
    stem = file_stem(address, namespace, settings.task_queue)
    return _recorded(data_dir() / f"{stem}.pid")
