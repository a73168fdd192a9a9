"""A 3,000-step run of 10 KB observations finishes under the server's default
limits (it continues as new). Minutes long: python -m pytest -q -m slow."""

from __future__ import annotations

import pytest

from bench.common import DevServer, FakeLLMProcess, bench_settings
from bench.p5_long_run import SERVER_BYTES_LIMIT, SERVER_EVENT_LIMIT, STEPS, long_run

pytestmark = pytest.mark.slow


@pytest.mark.timeout(1500)
async def test_a_3000_step_run_of_10_kb_observations_finishes(tmp_path):
    fake = FakeLLMProcess()
    server = DevServer(tmp_path / "server")  # the server's default limits
    try:
        client = await server.start()
        report = await long_run(client, bench_settings(fake.base_url, tmp_path / "workspace"), STEPS)
    finally:
        server.stop()
        fake.stop()
    assert report.steps == STEPS
    assert report.executions > 1
    # Every execution far from the limits that would terminate it.
    assert report.largest_events < SERVER_EVENT_LIMIT / 4
    assert report.largest_bytes < SERVER_BYTES_LIMIT / 4
    # Without continue-as-new, the chain's history would be one execution of this size.
    assert report.total_bytes > SERVER_BYTES_LIMIT / 2
