"""Settings for tests that run a worker in-process."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from config.settings import ConfigError, LLMSettings, Settings, load_settings


def make_settings(base_url: str, workspace_root: Path, tool_sandbox: str = "none", **llm: object) -> Settings:
    """Settings with one "default" LLM at `base_url` (normally a FakeOpenAI),
    its own task queue and the given workspace root; `llm` overrides fields of
    the LLM settings. Tools run unconfined unless a test asks for the sandbox,
    so test code may write its evidence (pids, execution logs) outside the
    run's directory; tests/test_sandbox.py covers the sandbox itself."""
    return Settings(
        llm={"default": LLMSettings(**{"model": "gpt-4o", "base_url": base_url, "api_key": "test-key", **llm})},
        workspace_root=workspace_root,
        task_queue=f"test-{uuid.uuid4().hex[:8]}",
        tool_sandbox=tool_sandbox,
    )


def write_config(tmp_path: Path, text: str, name: str = "config.toml") -> Path:
    """`text` as the file `name` in tmp_path."""
    path = tmp_path / name
    path.write_text(text)
    return path


def load_config(tmp_path: Path, text: str, env: dict | None = None) -> Settings:
    """Settings loaded from `text` as tmp_path/config.toml, with only `env` as the environment."""
    return load_settings(write_config(tmp_path, text), env=env or {})


def config_error(tmp_path: Path, text: str, env: dict | None = None) -> str:
    """The message of the ConfigError loading `text` (as load_config) raises,
    checked to be one line."""
    with pytest.raises(ConfigError) as err:
        load_config(tmp_path, text, env)
    message = str(err.value)
    assert "\n" not in message, message
    return message
