"""Shared fixtures: Temporal test servers from PyPI packages (never downloaded),
the fake OpenAI server, settings and a worker wired to them. The helpers behind
them live in testkit/."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest
from temporalio.testing import WorkflowEnvironment

from config.settings import Settings
from runtime.worker_factory import build_worker
from testkit.cli import InProcessCli
from testkit.fake_openai import FakeOpenAI
from testkit.servers import MissingBinary, start_dev_server, start_time_skipping_server
from testkit.settings import make_settings


async def _start(server: Callable[[], Awaitable[WorkflowEnvironment]]) -> WorkflowEnvironment:
    """A missing server binary ends the session with one message, not an error per test."""
    try:
        return await server()
    except MissingBinary as exc:
        pytest.exit(str(exc), returncode=2)


@pytest.fixture(scope="session")
async def time_skipping_env():
    env = await _start(start_time_skipping_server)
    yield env
    await env.shutdown()


@pytest.fixture(scope="session")
async def dev_env():
    env = await _start(start_dev_server)
    yield env
    await env.shutdown()


@pytest.fixture
def fake_llm():
    server = FakeOpenAI().start()
    yield server
    server.stop()


@pytest.fixture
def settings(fake_llm, tmp_path) -> Settings:
    return make_settings(fake_llm.base_url, tmp_path / "workspace")


@pytest.fixture
async def worker(time_skipping_env, settings):
    async with build_worker(time_skipping_env.client, settings) as running:
        yield running


@pytest.fixture
def cli(capsys, monkeypatch) -> InProcessCli:
    """starter.py's or worker.py's main, called in this process (testkit/cli.py)."""
    return InProcessCli(capsys, monkeypatch)
