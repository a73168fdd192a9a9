"""worker.py --metrics serves Prometheus metrics: Temporal's own and the
project's (tool durations, and what the think activity records)."""

from __future__ import annotations

import urllib.request

import pytest

from bench.common import free_port
from testkit.e2e import child_env, run_on_a_worker, wait_until
from testkit.fake_openai import FakeOpenAI, Reply, call

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
    address = f"127.0.0.1:{free_port()}"
    scraped = []

    async def scrape_when_recorded() -> None:
        await wait_until(lambda: "durable_manus_tool_duration_ms" in scrape(address), 15, "the tool metric", 0.5)
        scraped.append(scrape(address))

    try:
        result = await run_on_a_worker(
            dev_env, tmp_path, fake.base_url, "compute", scrape_when_recorded, DURABLE_MANUS_METRICS=address
        )
    finally:
        fake.stop()
    assert result.succeeded
    (text,) = scraped
    assert 'tool="python_execute"' in text and 'status="ok"' in text
    assert "durable_manus_think_llm_ms" in text and 'llm="default"' in text
    assert "durable_manus_prompt_tokens" in text and "durable_manus_completion_tokens" in text
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
