"""A tool is one file in tools/: the registry, the worker's activities and the
workflow's dispatch all come from the tool files, and workflow code imports no
activity implementation."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import uuid
from datetime import datetime
from pathlib import Path

import pytest
from temporalio.workflow import ActivityCancellationType

import tools
from agent_model.run import AgentRunInput
from agent_model.tool_spec import ToolSpec
from runtime.worker_factory import activities_for, build_worker
from testkit.settings import make_settings
from tests.test_agent_workflow import PROFILE
from workflows.agent import AgentWorkflow

REPO = Path(__file__).resolve().parent.parent


def test_workflow_code_imports_no_activity_implementation():
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, workflows.agent, workflows.planning; print(' '.join(sorted(sys.modules)))"],
        cwd=REPO, capture_output=True, text=True, check=True,
    ).stdout.split()
    heavy = [m for m in loaded if m.split(".")[0] in ("activities", "openai", "tiktoken", "httpx", "runtime") or m == "ctypes"]
    assert heavy == []


def test_every_tool_file_declares_one_consistent_spec():
    assert sorted(tools.TOOLS) == [
        "ask_human", "bash", "browser_use", "chart", "create_chat_completion", "mcp", "planning", "python_execute",
        "str_replace_editor", "terminate", "web_fetch", "web_search",
    ]
    for spec in tools.TOOLS.values():
        if spec.activity is not None:
            # Built by tool_spec.activity_config, which takes every bound with its reason.
            assert spec.activity["start_to_close_timeout"] and spec.activity["retry_policy"], spec.name
            # A cancelled run ends only once the tool's call has stopped.
            assert spec.activity["cancellation_type"] == ActivityCancellationType.WAIT_CANCELLATION_COMPLETED, spec.name
    with pytest.raises(ValueError, match="exactly one"):
        ToolSpec(name="x", schema={"function": {"name": "x"}})


def test_the_worker_registers_one_activity_per_activity_tool(tmp_path):
    settings = make_settings("http://127.0.0.1:1/v1", tmp_path / "workspace")
    names = {getattr(a, "__temporal_activity_definition").name for a in activities_for(settings)}
    assert names == {
        "think", "prepare_workspace", "restore_workspace", "bash", "chart", "python_execute", "str_replace_editor", "web_fetch",
        "web_search",
        "browser_act", "browser_close",  # browser_use runs in the workflow and schedules these
        "mcp_list_tools", "mcp_call_tool",  # the tools of MCP servers (agent_model/mcp.py)
    }  # restore_workspace: a fork's or a rewind's files (activities/snapshot_activities.py)


def readme_tool() -> str:
    """The tool file of docs/architecture.md's "Adding a tool", as written there."""
    text = (REPO / "docs" / "architecture.md").read_text()
    section = text[text.index("## Adding a tool") :]
    block = section[section.index("```python") + len("```python") : section.index("```", section.index("```python") + 9)]
    return textwrap.dedent(block)


@pytest.fixture
def toy_tool(tmp_path):
    """The manual's example tool, one new file in a folder of the tools package."""
    folder = tmp_path / "more_tools"
    folder.mkdir()
    (folder / "utc_now.py").write_text(readme_tool())
    tools.__path__.append(str(folder))
    tools.discover()
    yield tools.TOOLS["utc_now"]
    tools.__path__.remove(str(folder))
    sys.modules.pop("tools.utc_now", None)
    tools.discover()


async def test_a_new_tool_file_named_in_a_profile_runs_end_to_end(toy_tool, time_skipping_env, fake_llm, tmp_path):
    from testkit.fake_openai import Reply, call, terminate

    settings = make_settings(fake_llm.base_url, tmp_path / "workspace")
    profile = PROFILE.model_copy(update={"tools": ["utc_now", "terminate"]})
    fake_llm.turns = [Reply(tool_calls=[call("utc_now", {})]), terminate("done")]
    async with build_worker(time_skipping_env.client, settings):
        handle = await time_skipping_env.client.start_workflow(
            AgentWorkflow.run,
            AgentRunInput(task="reverse it", profile=profile),
            id=f"toy-{uuid.uuid4().hex[:8]}",
            task_queue=settings.task_queue,
        )
        result = await handle.result()
    assert result.succeeded
    now = datetime.fromisoformat(result.steps[0].tool_calls[0].observation)
    assert now.tzinfo is not None and not result.steps[0].tool_calls[0].error
    assert fake_llm.requests[0].body["tools"][0]["function"]["name"] == "utc_now"
    scheduled = [
        e.activity_task_scheduled_event_attributes
        for e in (await handle.fetch_history()).events
        if e.HasField("activity_task_scheduled_event_attributes")
    ]
    toy = [a for a in scheduled if a.activity_type.name == "utc_now"]
    assert len(toy) == 1 and toy[0].start_to_close_timeout.seconds == 5
