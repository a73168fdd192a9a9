"""The pieces of the starter's detached worker that need no server: which
worker a pid file may name, how its files are named, the idle query, and the
variable that sets its idle time."""

from __future__ import annotations

import os

import pytest

from config.settings import ConfigError
from runtime.detached_worker import DEFAULT_IDLE_EXIT, file_stem, idle_exit_seconds, worker_process_alive
from runtime.idle_exit import open_runs_query
from runtime.worker_options import parse_worker_args


def test_a_process_that_is_not_a_starters_worker_is_never_reused():
    assert not worker_process_alive(os.getpid())  # pytest, not worker.py --idle-exit
    assert not worker_process_alive(2**22 + 1)  # no such process


def test_each_server_namespace_and_queue_has_its_own_files():
    stems = {
        file_stem("127.0.0.1:7233", "default", "durable-manus"),
        file_stem("10.0.0.5:7233", "default", "durable-manus"),
        file_stem("127.0.0.1:7233", "other", "durable-manus"),
        file_stem("127.0.0.1:7233", "default", "q2"),
    }
    assert len(stems) == 4
    assert file_stem("a", "b", "../../etc/passwd\n").startswith("worker-.._.._etc_passwd_-")


def test_the_idle_query_quotes_the_queue():
    assert open_runs_query('a"b\\c') == 'TaskQueue = "a\\"b\\\\c" AND ExecutionStatus = "Running"'


def test_the_idle_time_is_a_setting(monkeypatch):
    monkeypatch.delenv("DURABLE_MANUS_WORKER_IDLE_EXIT", raising=False)
    assert idle_exit_seconds() == DEFAULT_IDLE_EXIT
    monkeypatch.setenv("DURABLE_MANUS_WORKER_IDLE_EXIT", "0")
    assert idle_exit_seconds() == 0
    monkeypatch.setenv("DURABLE_MANUS_WORKER_IDLE_EXIT", "soon")
    with pytest.raises(ConfigError, match="DURABLE_MANUS_WORKER_IDLE_EXIT must be a number of seconds"):
        idle_exit_seconds()


def test_the_worker_takes_an_idle_exit():
    assert parse_worker_args(["--idle-exit", "12"]).idle_exit == 12.0
    assert parse_worker_args([]).idle_exit is None
