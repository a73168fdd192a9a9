"""`python starter.py ui` as a process: it prints its link once, the link lets
a browser in, the page's address is written down while it serves (so that a
run started meanwhile prints its page), and Ctrl-C stops it in one line."""

from __future__ import annotations

import http.client
import json
import re
import signal

import pytest

from runtime.mcp_http_record import PAGE_RECORD_DIR
from testkit.e2e import child_env, free_port, server_address, start_starter, unique_queue, wait_until
from testkit.fake_openai import terminate

pytestmark = pytest.mark.e2e


def get(port: int, path: str, cookie: str | None = None) -> tuple[int, dict[str, str], str]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("GET", path, headers={"Cookie": cookie} if cookie else {})
        answer = connection.getresponse()
        return answer.status, {k.lower(): v for k, v in answer.getheaders()}, answer.read().decode()
    finally:
        connection.close()


async def test_ui_prints_its_link_serves_and_stops_on_ctrl_c(dev_env, fake_llm, tmp_path):
    fake_llm.responder = lambda body, attempt: terminate("page done")
    env = child_env(tmp_path, address=server_address(dev_env), task_queue=unique_queue("ui"), base_url=fake_llm.base_url)
    port = free_port()
    ui = start_starter(["ui", "--port", str(port), "--worker", "always"], env, tmp_path / "logs", "ui")
    try:
        await wait_until(lambda: "?token=" in ui.stdout() or ui.returncode is not None, 60, "the ui's link")
        links = re.findall(rf"http://127\.0\.0\.1:{port}/\?token=([A-Za-z0-9_-]+)", ui.stdout())
        assert len(links) == 1, ui.describe()  # once
        token = links[0]
        records = list((tmp_path / "data" / PAGE_RECORD_DIR).glob("*.json"))
        assert [p.name for p in records] == [f"{ui.pid}.json"], ui.describe()
        record = json.loads(records[0].read_text())
        assert record["port"] == port and record["temporal"] == server_address(dev_env) and token not in records[0].read_text()

        assert get(port, "/")[0] == 403
        status, headers, _ = get(port, f"/?token={token}")
        assert status == 303 and headers["location"] == "/"
        cookie = headers["set-cookie"].split(";")[0]
        assert get(port, "/", cookie)[0] == 200

        run = start_starter(["run", "--detach", "Show me on the page"], env, tmp_path / "logs", "run")
        assert await run.wait(60) == 0, run.describe()
        (line,) = [line for line in run.stdout().splitlines() if line.startswith("run page: ")]
        run_id = re.search(r"^run (\S+)$", run.stdout(), re.M).group(1)
        assert line == f"run page: http://127.0.0.1:{port}/run/{run_id}"

        async def finished_on_the_page() -> bool:
            return "page done" in get(port, f"/run/{run_id}", cookie)[2]

        await wait_until(finished_on_the_page, 60, "the run to finish on the page (the ui's own worker)", 0.3)
    finally:
        ui.signal_group(signal.SIGINT)
        code = await ui.wait(30)
    assert code == 130, ui.describe()
    lines = [line for line in ui.stderr().splitlines() if line.strip()]
    assert lines[-1].startswith("ui: the run page stopped, and with it this process's worker (--worker always)")
    assert "Traceback" not in ui.stderr(), ui.describe()
    assert not list((tmp_path / "data" / PAGE_RECORD_DIR).glob("*.json"))  # no longer recorded
