"""Settings for tests that run a worker in-process."""

from __future__ import annotations

import uuid
from pathlib import Path

from config.settings import LLMSettings, Settings


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
