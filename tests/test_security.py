"""Secrets stay on the worker: not in any payload of a run's history, not
readable by the code the agent runs (worker.py with its real sandbox)."""

from __future__ import annotations

import base64
import json
import uuid

import pytest

from agent_model.run import AgentRunInput, AgentRunResult
from tests.e2e_support import child_env, server_address, start_worker, unique_queue
from tests.fake_openai import FakeOpenAI, Reply, call
from tests.test_e2e import stop_all
from workflows.agent import AgentWorkflow

pytestmark = pytest.mark.e2e

SECRET_PREFIX = "sk-secret-"
"""What the snooping code looks for: the whole key must not appear in its source,
which is part of the history too."""
SECRET = f"{SECRET_PREFIX}{uuid.uuid4().hex}"

SNOOP = f"""
import glob, os
hits = []
for path in glob.glob("/proc/*/environ"):
    try:
        if {SECRET_PREFIX!r}.encode() in open(path, "rb").read():
            hits.append(path)
    except OSError:
        pass
print("env has key:", any("API_KEY" in k for k in os.environ), "environ hits:", hits)
"""


def payload_texts(node) -> list[str]:
    """Every string in the history JSON, plus the decoded `data` of every payload."""
    texts: list[str] = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "data" and isinstance(value, str):
                try:
                    texts.append(base64.b64decode(value).decode("utf-8", "replace"))
                except ValueError:
                    pass
            texts.extend(payload_texts(value))
    elif isinstance(node, list):
        for item in node:
            texts.extend(payload_texts(item))
    elif isinstance(node, str):
        texts.append(node)
    return texts


async def test_the_key_never_reaches_history_or_tools(dev_env, tmp_path):
    fake = FakeOpenAI(
        turns=[
            Reply(tool_calls=[call("python_execute", {"code": SNOOP})]),
            Reply(tool_calls=[call("terminate", {"status": "success", "answer": "done"})]),
        ],
        api_key=SECRET,  # the worker really uses the key: the fake refuses any other
    ).start()
    queue = unique_queue("security")
    env = child_env(tmp_path, address=server_address(dev_env), task_queue=queue, base_url=fake.base_url)
    env.update(OPENAI_API_KEY=SECRET, DURABLE_MANUS_TOOL_SANDBOX="auto")
    worker = start_worker(env, tmp_path / "logs")
    try:
        profile_input = AgentRunInput(task="look around", agent="manus")
        handle = await dev_env.client.start_workflow(
            AgentWorkflow.run, profile_input, id=f"sec-{uuid.uuid4().hex[:8]}", task_queue=queue, result_type=AgentRunResult
        )
        result = await handle.result()
        # bash is not a manus tool; the swe agent has it.
        swe = await dev_env.client.start_workflow(
            AgentWorkflow.run,
            AgentRunInput(task="look around", agent="swe"),
            id=f"sec-{uuid.uuid4().hex[:8]}",
            task_queue=queue,
            result_type=AgentRunResult,
        )
        fake.turns = [
            Reply(tool_calls=[call("bash", {"command": "env | grep -c sk-secret; cat /proc/*/environ 2>/dev/null | grep -c sk-secret"})]),
            Reply(tool_calls=[call("terminate", {"status": "success", "answer": "done"})]),
        ]
        swe_result = await swe.result()
    finally:
        await stop_all(worker)
        fake.stop()

    observation = result.steps[0].tool_calls[0].observation
    assert "env has key: False environ hits: []" in observation, observation
    # grep -c finds nothing (and so exits 1): the key is neither in bash's
    # environment nor in any /proc/*/environ the command can read.
    assert swe_result.steps[0].tool_calls[0].observation.split() == ["Error:", "0", "0", "Exit", "code:", "1"]
    assert all(r.headers.get("authorization") == f"Bearer {SECRET}" for r in fake.requests)

    for run in (handle, swe):
        history = await run.fetch_history()
        data = json.loads(history.to_json())
        texts = payload_texts(data)
        assert texts, "the history should have payloads to search"
        assert not any(SECRET in t for t in texts), "the API key is in the run's history"
        assert SECRET not in history.to_json()
