"""Dedup by construction, for every kind of tool: the worker that ran a call
finishes its observation message and the workflow adds exactly that message,
so no think after it carries it again (it names the message by its digest in
the shared store), whatever the tool: processes (bash, python_execute), the
editor, the web (web_fetch, web_search), the browser (also when the workflow
adds a note of its own, the session reopened) and an MCP server's tool.

One run on the session's dev server, with the fake LLM, the fixture site, a
stdio MCP server and Chromium in the tool sandbox."""

from __future__ import annotations

import sys

import pytest

pytest.importorskip("mcp", reason="the mcp package is not installed (pip install -r requirements.txt)")

from agent_model.mcp import function_name_for
from agent_model.messages import Role
from agent_model.run import HumanAnswer
from config.mcp_config import McpServerSettings
from config.settings import SearchSettings, WebSettings
from prompts.browser import SESSION_REOPENED
from runtime.worker_factory import build_worker
from testkit import fake_web
from testkit.e2e import wait_until
from testkit.fake_openai import Reply, call, terminate
from testkit.fake_site import FakeSite
from testkit.fake_web import Answer
from testkit.mcp_servers import STDIO_ARGS
from testkit.settings import make_settings
from tests.test_agent_workflow import PROFILE, start
from tests.test_browser_engine import BROWSER_MISSING
from tests.test_think_context import think_inputs
from tests.record_history import pending_question
from workflows.agent import AgentWorkflow

KINDS = ["bash", "python_execute", "str_replace_editor", "web_fetch", "web_search", "browser_use", "mcp"]


def one_call(name: str, **arguments) -> Reply:
    return Reply(tool_calls=[call(name, arguments)])


@pytest.fixture
def site():
    served = FakeSite().start()
    served.route("/brave", Answer(
        body=fake_web.brave_json([("Home", served.url("/"), "the fixture")]), content_type="application/json"
    ))
    yield served
    served.stop()


@pytest.mark.skipif(bool(BROWSER_MISSING), reason=BROWSER_MISSING or "")
async def test_no_think_carries_an_observation_of_any_tool_kind(dev_env, fake_llm, site, tmp_path):
    mcp_tool = function_name_for("local", "add")
    settings = make_settings(fake_llm.base_url, tmp_path / "workspace", tool_sandbox="auto").model_copy(update={
        "web": WebSettings(allow=(site.origin,)),
        "search": SearchSettings(
            engine="brave", fallback_engines=[], retry_delay=0, max_retries=0,
            endpoints={"brave": site.url("/brave")}, brave_api_key="brave-key-0123456789",
        ),
        "mcp_servers": {"local": McpServerSettings(kind="stdio", command=sys.executable, args=STDIO_ARGS)},
    })
    profile = PROFILE.model_copy(update={
        "tools": [*KINDS[:-1], "ask_human", "terminate"], "mcp_servers": ["local"], "max_steps": 20,
    })
    fake_llm.turns = [
        one_call("bash", command="echo from-bash"),
        one_call("python_execute", code="print('from-python')"),
        one_call("str_replace_editor", command="create", path="notes.txt", file_text="from the editor\n"),
        one_call("web_fetch", url=site.url("/page2")),
        one_call("web_search", query="fixture", num_results=1),
        one_call("browser_use", action="go_to_url", url=site.url("/")),
        one_call("ask_human", inquire="go on?"),
        # The worker's browser was closed meanwhile: this action reopens the tab,
        # and the workflow adds its own note after the observation.
        one_call("browser_use", action="scroll_down"),
        one_call(mcp_tool, a=2, b=3),
        terminate("done"),
    ]
    async with build_worker(dev_env.client, settings) as worker:
        handle = await start(dev_env, settings, task="use every tool", profile=profile)
        question = await pending_question(handle, 60)
        assert worker.browsers is not None
        await worker.browsers.close(handle.id)
        await wait_until(lambda: not worker.browsers.open_sessions, 30, "the browser to close")
        await handle.execute_update(AgentWorkflow.answer, HumanAnswer(question_id=question.id, text="yes"))
        result = await handle.result()

    assert result.succeeded, result.note
    called = [step.tool_calls[0] for step in result.steps if step.tool_calls]
    assert [c.name for c in called] == [*KINDS[:6], "ask_human", "browser_use", mcp_tool, "terminate"]
    assert not [c for c in called if c.error], [c.observation for c in called if c.error]

    # No think carried an activity's observation: each was named by its digest
    # instead. Only ask_human's, made by the workflow itself, travels.
    inputs = think_inputs(await handle.fetch_history())
    assert len(inputs) == len(called)
    carried = [m.name for request in inputs[1:] for m in request.messages if m.role == Role.TOOL]
    assert carried == ["ask_human"]
    assert all(request.context is not None and request.context.stored for request in inputs[1:])

    # The model saw every observation, and the browser's note after its own.
    seen = fake_llm.requests[-1].messages
    tool_messages = [m for m in seen if m["role"] == "tool"]
    assert "from-bash" in tool_messages[0]["content"] and "from-python" in tool_messages[1]["content"]
    assert tool_messages[-1]["content"] == "5"
    note = seen.index({"role": "user", "content": SESSION_REOPENED})
    assert seen[note - 1]["role"] == "tool" and site.url("/") in seen[note - 1]["content"]
