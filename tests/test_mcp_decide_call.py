"""The MCP server's decide_call tool, called by the MCP client SDK over stdio
(`starter.py mcp-server --with-worker` on the dev server, the fake model): a
run started with start_run under `[approval] mode = "risky"` waits at its
gated calls; one is approved, the next rejected with a reason the model gets."""

from __future__ import annotations

import pytest

pytest.importorskip("mcp", reason="the mcp package is not installed (pip install -r requirements.txt)")

from testkit.e2e import child_env, server_address, unique_queue, wait_until
from testkit.fake_openai import python, terminate
from tests.test_mcp_server import Session, stdio_session

pytestmark = pytest.mark.e2e

FIRST = "import subprocess\nprint('first', 6 * 7)"
SECOND = "import subprocess\nprint('second')"
"""Gated by the built-in risky set (subprocess); harmless when they run."""


async def pending_approval(session: Session, run_id: str, call_id: str) -> dict:
    found: dict = {}

    async def waiting() -> bool:
        found.update(await session.call("run_status", run_id=run_id))
        return (found.get("pending_approval") or {}).get("id") == call_id

    await wait_until(waiting, 30, f"call {call_id} of {run_id} waiting for approval", 0.2)
    return found["pending_approval"]


async def test_decide_call_approves_and_rejects_waiting_calls(dev_env, fake_llm, tmp_path):
    fake_llm.turns = [python(FIRST), python(SECOND), terminate("decided")]
    config = tmp_path / "config.toml"
    config.write_text('[approval]\nmode = "risky"\n', encoding="utf-8")
    env = child_env(
        tmp_path, address=server_address(dev_env), task_queue=unique_queue("mcp-decide"), base_url=fake_llm.base_url,
        extra={"DURABLE_MANUS_CONFIG": str(config)},
    )
    async with stdio_session(env, tmp_path / "mcp-server.err", "--with-worker") as session:
        run_id = (await session.call("start_run", task="Run the two snippets"))["run_id"]

        first = await pending_approval(session, run_id, "1.1")
        assert first["tool"] == "python_execute" and "subprocess" in first["arguments"], first
        approved = await session.call("decide_call", run_id=run_id, action="approve")
        assert approved == {"accepted": True, "run_id": run_id, "call_id": "1.1", "action": "approve"}

        await pending_approval(session, run_id, "2.1")
        refused = await session.error("decide_call", run_id=run_id, action="approve", call_id="1.1")
        assert "1.1" in refused and "closed" in refused, refused
        rejected = await session.call(
            "decide_call", run_id=run_id, action="reject", call_id="2.1", reason="enough of that"
        )
        assert rejected == {"accepted": True, "run_id": run_id, "call_id": "2.1", "action": "reject"}

        result = await session.call("run_result", run_id=run_id, wait_seconds=30)
        assert result["finished"] is True and result["final_answer"] == "decided", result
        nothing = await session.error("decide_call", run_id=run_id, action="approve")
        assert run_id in nothing, nothing

    first_call, second_call = fake_llm.requests[1], fake_llm.requests[2]
    assert [m["content"].strip() for m in first_call.messages if m["role"] == "tool"] == ["first 42"]
    assert [m["content"] for m in second_call.messages if m["role"] == "tool"][-1] == (
        "The user rejected this call: enough of that"
    )
