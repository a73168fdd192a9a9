"""worker.py --metrics serves Prometheus metrics: Temporal's own and the
project's (tool durations, and what the think activity records)."""

from __future__ import annotations

import urllib.request
import uuid

import pytest

from agent_model.run import AgentRunInput, AgentRunResult
from bench.common import free_port
from tests.e2e_support import child_env, server_address, start_worker, unique_queue, wait_until
from tests.fake_openai import FakeOpenAI, Reply, call
from tests.test_e2e import stop_all
from workflows.agent import AgentWorkflow

pytestmark = pytest.mark.e2e


def scrape(address: str) -> str:
    try:
        with urllib.request.urlopen(f"http://{address}/metrics", timeout=2) as response:
            return response.read().decode()
    except OSError:
        return ""


async def test_a_worker_serves_prometheus_metrics(dev_env, tmp_path):
    fake = FakeOpenAI(
        turns=[
            Reply(tool_calls=[call("python_execute", {"code": "print(6 * 7)"})]),
            Reply(tool_calls=[call("terminate", {"status": "success", "answer": "42"})]),
        ]
    ).start()
    queue = unique_queue("metrics")
    address = f"127.0.0.1:{free_port()}"
    env = child_env(tmp_path, address=server_address(dev_env), task_queue=queue, base_url=fake.base_url)
    env.update(DURABLE_MANUS_TOOL_SANDBOX="auto", DURABLE_MANUS_METRICS=address)
    worker = start_worker(env, tmp_path / "logs")
    try:
        handle = await dev_env.client.start_workflow(
            AgentWorkflow.run,
            AgentRunInput(task="compute", agent="manus"),
            id=f"metrics-{uuid.uuid4().hex[:8]}",
            task_queue=queue,
            result_type=AgentRunResult,
        )
        assert (await handle.result()).succeeded
        await wait_until(lambda: "durable_manus_tool_duration_ms" in scrape(address), 15, "the tool metric", 0.5)
        text = scrape(address)
    finally:
        await stop_all(worker)
        fake.stop()
    assert 'tool="python_execute"' in text and 'status="ok"' in text
    assert "temporal_activity_execution_latency" in text  # the SDK's own metrics


def test_a_bad_metrics_address_is_one_line(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parent.parent
    env = child_env(tmp_path, address="127.0.0.1:1", task_queue="q", base_url="http://127.0.0.1:1/v1")
    env["OPENAI_API_KEY"] = "sk-test"
    done = subprocess.run(
        [sys.executable, "worker.py", "--metrics", "nonsense"], cwd=repo, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "HOST:PORT" in done.stderr and "Traceback" not in done.stderr
