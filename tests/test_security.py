"""Secrets stay on the worker: not in any payload of a run's history, not
readable by the code the agent runs (worker.py with its real sandbox)."""

from __future__ import annotations

import base64
import json
import uuid

import pytest

from agent_model.run import AgentRunInput, AgentRunResult
from testkit.e2e import child_env, run_on_a_worker, server_address, start_worker, unique_queue
from testkit.fake_openai import FakeOpenAI, Reply, call
from tests.test_e2e import stop_all
from workflows.agent import AgentWorkflow

REPO = __import__("pathlib").Path(__file__).resolve().parent.parent

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


NOBODY = 65534


def environ_readable_by_same_user(harden: bool) -> list[str]:
    """A stand-in worker running as an unprivileged user (root may read anything)
    starts a process of the same user that tries to read the worker's environ."""
    import os
    import subprocess
    import sys

    # Imports happen before dropping to nobody, who cannot read root's Python;
    # the reader is plain sh, started by the stand-in worker.
    script = (
        "import ctypes, os, subprocess\n"
        "from runtime.worker_factory import harden_worker_process\n"
        f"os.setgid({NOBODY}); os.setuid({NOBODY})\n"
        # Changing uid clears the dumpable flag; a worker started as this user has it set.
        "ctypes.CDLL(None).prctl(4, 1, 0, 0, 0)\n"
        f"if {harden}: harden_worker_process()\n"
        "reader = subprocess.run(['sh', '-c', 'tr \"\\\\0\" \"\\\\n\" < /proc/$PPID/environ | grep -c sk-dump'],"
        " capture_output=True, text=True)\n"
        "print(reader.stdout.strip(), 'Permission denied' in reader.stderr)\n"
    )
    env = {**os.environ, "OPENAI_API_KEY": "sk-dump-test", "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=str(REPO)).stdout.split()


def test_a_non_dumpable_worker_hides_its_environment_from_same_user_processes():
    """Without the sandbox (e.g. in a container), tools run as the worker's user;
    the worker marks itself non-dumpable so they cannot read its environment."""
    import os

    if os.geteuid() != 0:
        pytest.skip("needs root to act as two processes of another user")
    assert environ_readable_by_same_user(harden=False) == ["1", "False"]  # the danger is real
    assert environ_readable_by_same_user(harden=True) == ["0", "True"]


CONTROL_PLANE_PROBE = """
import shutil, socket, subprocess
for name, (host, port) in {targets!r}.items():
    s = socket.socket()
    s.settimeout(3)
    try:
        s.connect((host, port))
        print("REACHED", name)
    except OSError as e:
        print("no route to", name, type(e).__name__)
cli = shutil.which("temporal")
if cli:
    listed = subprocess.run([cli, "workflow", "list", "--address", "{temporal}", "--limit", "1"],
                            capture_output=True, text=True, timeout=20)
    print("temporal cli exit", listed.returncode)
else:
    print("temporal cli absent")
"""


async def test_tool_code_has_no_route_to_the_temporal_frontend_or_the_llm(dev_env, tmp_path):
    """As an attacker would: from python_execute, connect to the Temporal
    frontend (which could read, terminate and answer every run) and to the LLM
    endpoint, and drive the `temporal` CLI that sits in the worker's venv."""
    fake = FakeOpenAI(turns=[]).start()
    temporal = server_address(dev_env)
    llm_host, llm_port = fake.base_url.split("//")[1].split("/")[0].split(":")
    t_host, t_port = temporal.rsplit(":", 1)
    probe = CONTROL_PLANE_PROBE.format(
        targets={"temporal": (t_host, int(t_port)), "llm": (llm_host, int(llm_port))}, temporal=temporal
    )
    fake.turns = [
        Reply(tool_calls=[call("python_execute", {"code": probe})]),
        Reply(tool_calls=[call("terminate", {"status": "success", "answer": "done"})]),
    ]
    try:
        result = await run_on_a_worker(dev_env, tmp_path, fake.base_url, "look around")
    finally:
        fake.stop()
    observation = result.steps[0].tool_calls[0].observation
    assert "no route to temporal" in observation and "no route to llm" in observation, observation
    assert "REACHED" not in observation
    assert "temporal cli exit 0" not in observation
    assert result.succeeded, "the run goes on after the attack"


async def test_a_worker_without_bubblewrap_refuses_tools_and_says_so(dev_env, tmp_path):
    fake = FakeOpenAI(
        turns=[
            Reply(tool_calls=[call("python_execute", {"code": "open('ran', 'w').write('x')"})]),
            Reply(tool_calls=[call("terminate", {"status": "success", "answer": "done"})]),
        ]
    ).start()
    try:
        result = await run_on_a_worker(
            dev_env, tmp_path, fake.base_url, "write a file", DURABLE_MANUS_BWRAP=str(tmp_path / "no-bwrap")
        )
    finally:
        fake.stop()
    call_record = result.steps[0].tool_calls[0]
    assert call_record.error and "disabled on this worker" in call_record.observation
    assert not list(tmp_path.rglob("ran")), "the tool ran unconfined"
    log = "\n".join(p.read_text() for p in (tmp_path / "logs").glob("*"))
    assert "tool sandbox: UNAVAILABLE" in log and "apt-get install bubblewrap" in log
