"""The MCP server's send_message: a follow-up to a finished run over stdio
(the server's own worker, the dev server, the fake model) answers with the
turn's answer, or says the turn is working when it has not answered in time."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("mcp", reason="the mcp package is not installed (pip install -r requirements.txt)")

from testkit.e2e import child_env, server_address, unique_queue
from testkit.fake_openai import Reply, python, terminate
from tests.test_mcp_server import stdio_session

pytestmark = pytest.mark.e2e


def scripted(body: dict, attempt: int) -> Reply:
    said = [m.get("content") for m in body["messages"] if m["role"] == "user"]
    if "take your time" in said:
        return python("import time; time.sleep(5)")
    if "what did I ask first?" in said:
        return terminate(f"you asked: {json.dumps(said[0])[:60]}")
    return terminate("done the first thing")


async def test_a_follow_up_over_mcp_gets_the_turn_s_answer(dev_env, fake_llm, tmp_path):
    fake_llm.responder = scripted
    env = child_env(tmp_path, address=server_address(dev_env), task_queue=unique_queue("mcp-chat"), base_url=fake_llm.base_url)
    async with stdio_session(env, tmp_path / "mcp-server.err", "--with-worker") as session:
        run_id = (await session.call("start_run", task="Do the first thing"))["run_id"]
        assert (await session.call("run_result", run_id=run_id, wait_seconds=30))["final_answer"] == "done the first thing"

        answer = await session.call("send_message", run_id=run_id, text="what did I ask first?")
        assert answer["turn"] == 2 and answer["finished"] is True and answer["stop_reason"] == "terminated"
        assert "Do the first thing" in answer["answer"] and "new execution" in answer["reply"]

        working = await session.call("send_message", run_id=run_id, text="take your time", wait_seconds=0.5)
        assert working["turn"] == 3 and working["finished"] is False and "turn 3 is working" in working["note"]
        assert "the message is empty" in await session.error("send_message", run_id=run_id, text="   ")
        assert "no run with id 'nope'" in await session.error("send_message", run_id="nope", text="hi")
        await session.call("cancel_run", run_id=run_id)
