"""The run page over HTTP, on the session's dev server with a worker in this
process and the fake model: who may call it (token, Host, Origin), that no GET
acts, that hostile text arrives escaped, that steps come on the event stream
(and again from Last-Event-ID), and that every action goes through the CLI's
code path: start, answer, approve/reject, follow up, fork, cancel; browser
screenshots are served from the run's directory only."""

from __future__ import annotations

import asyncio
import json
import os
import re
from pathlib import Path

import pytest
from temporalio.client import Client

from agent_model.run import AgentRunResult
from agent_model.workspace_names import workspace_name_for
from runtime.worker_factory import build_worker
from testkit.e2e import wait_until
from testkit.fake_openai import Reply, call, python, terminate, turn_of
from testkit.run_page import Page, events, request, run_path, serving_page

HOSTILE_TASK = "Say hi <script>alert('task')</script>\x1b]52;c;aGk=\x07 please"
HOSTILE_OUTPUT = "<img src=x onerror=alert('observation')>"
JPEG = b"\xff\xd8\xff\xe0" + b"\0" * 64
REPO = Path(__file__).resolve().parent.parent


def scripted(body: dict, attempt: int) -> Reply:
    """Each run's replies, told apart by its task (the first user message)."""
    task = next((m.get("content") for m in body["messages"] if m["role"] == "user"), "") or ""
    task = task if isinstance(task, str) else json.dumps(task)
    turn = turn_of(body)
    if "Say hi" in task:
        script = [python(f"print({HOSTILE_OUTPUT!r})", content="I think <b>bold</b> thoughts"), terminate("hi")]
    elif "Pick a colour" in task:
        script = [python("print('warming up')"), Reply(tool_calls=[call("ask_human", {"inquire": "Which colour?"})]),
                  terminate("blue it is")]
    elif "Gated" in task:
        script = [python("print('first')"), python("print('second')"), terminate("gated done")]
    elif "Wait for me" in task:
        script = [Reply(tool_calls=[call("ask_human", {"inquire": "Shall I go on?"})])]
    else:
        script = [terminate("nothing to do")]
    return script[min(turn, len(script) - 1)]


@pytest.fixture
async def world(dev_env, fake_llm, settings):
    fake_llm.responder = scripted
    async with build_worker(dev_env.client, settings), serving_page(dev_env.client, settings) as page:
        yield page


async def act(page: Page, path: str, **fields: str) -> dict:
    """A form sent as the page's script sends it; its JSON answer."""
    answer = await request(page, "POST", path, form=fields, headers={"Accept": "application/json"})
    assert answer.status == 200, answer.text
    return json.loads(answer.text)


async def start(page: Page, task: str, **fields: str) -> str:
    done = await act(page, "/runs", task=task, kind="agent:manus", **fields)
    assert done["ok"], done
    return done["location"].rsplit("/", 1)[1]


async def result_of(client: Client, run_id: str) -> AgentRunResult:
    return await client.get_workflow_handle(run_id, result_type=AgentRunResult).result()


async def until_page_shows(page: Page, run_id: str, *needles: str, timeout: float = 30) -> str:
    found = {}

    async def shown() -> bool:
        found["text"] = (await request(page, "GET", run_path(run_id))).text
        return all(needle in found["text"] for needle in needles)

    await wait_until(shown, timeout, f"the page of {run_id} to show {needles!r}", 0.3)
    return found["text"]


# ---- who may call it ---------------------------------------------------------------------


async def test_every_call_needs_the_token_its_host_and_for_a_post_its_origin(world):
    page = world
    refused = await request(page, "GET", "/", cookie=False)
    assert refused.status == 403 and "python starter.py ui" in refused.text
    assert (await request(page, "GET", "/static/page.js", cookie=False)).status == 403
    assert (await request(page, "GET", "/?token=" + "x" * 43, cookie=False)).status == 403

    entry = await request(page, "GET", f"/?state=finished&token={page.guard.token}", cookie=False)
    assert entry.status == 303 and entry.headers["location"] == "/?state=finished"  # the token leaves the address
    (cookie,) = entry.cookies
    assert cookie.startswith(f"{page.guard.cookie_name}={page.guard.token};")
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie

    listed = await request(page, "GET", "/")
    assert listed.status == 200
    for answer in (listed, refused):  # every answer, refusals too
        policy = answer.headers["content-security-policy"]
        assert "default-src 'self'" in policy and "frame-ancestors 'none'" in policy and "unsafe-inline" not in policy
        assert answer.headers["x-frame-options"] == "DENY" and answer.headers["x-content-type-options"] == "nosniff"
    assert re.findall(r"<script[^>]*>", listed.text) == ['<script src="/static/page.js?v=1" defer>']  # no inline script

    for host in ("evil.example:%d" % page.port, "127.0.0.1:1", "attacker.test"):  # DNS rebinding
        assert (await request(page, "GET", "/", host=host)).status == 403, host
    assert (await request(page, "GET", "/", host=f"localhost:{page.port}")).status == 200

    form = {"task": "Wait for me", "kind": "agent:manus"}
    for headers, same in (({}, False), ({"Origin": "http://evil.example"}, False),
                          ({"Origin": page.origin, "Sec-Fetch-Site": "cross-site"}, False)):
        answer = await request(page, "POST", "/runs", form=form, headers=headers, same_origin=same)
        assert answer.status == 403, headers
    assert (await request(page, "POST", "/runs", form=form, cookie=False)).status == 403
    json_body = await request(page, "POST", "/runs", body=b'{"task": "x"}', headers={"Content-Type": "application/json"})
    assert json_body.status == 415
    assert "Wait for me" not in (await request(page, "GET", "/")).text  # nothing of it started a run


async def test_no_get_acts(world, dev_env):
    page = world
    run_id = await start(page, "Wait for me")
    await until_page_shows(page, run_id, "Shall I go on?")
    for action in ("answer", "decide", "message", "cancel", "fork"):
        answer = await request(page, "GET", run_path(run_id, action) + "?text=yes&decision=approve&step=0")
        assert answer.status == 405 and answer.headers["allow"] == "POST", action
    assert (await request(page, "GET", "/runs?task=Wait+for+me")).status == 405
    description = await dev_env.client.get_workflow_handle(run_id).describe()
    assert description.status.name == "RUNNING"  # still waiting: nothing was answered or cancelled
    done = await act(page, run_path(run_id, "cancel"))
    assert done["ok"] and done["line"] == f"run {run_id} ended: CANCELLED", done
    page_text = await until_page_shows(page, run_id, "cancelled")
    assert "cancel the run" not in page_text


# ---- what it shows ---------------------------------------------------------------------------


async def test_hostile_task_thought_and_observation_arrive_escaped(world, dev_env):
    page = world
    run_id = await start(page, HOSTILE_TASK)
    await result_of(dev_env.client, run_id)
    shown = await until_page_shows(page, run_id, "finished")
    listed = (await request(page, "GET", "/?q=say+hi")).text
    streamed = "\n".join(data for _, data in await events(page, run_path(run_id, "events"), lambda seen: False))
    for text in (shown, listed, streamed):
        assert "<script>alert" not in text and "<img src=x" not in text and "<b>bold" not in text
        assert "\x1b" not in text and "\x07" not in text
    assert "Say hi &lt;script&gt;alert(&#x27;task&#x27;)&lt;/script&gt; please" in shown
    assert "&lt;img src=x onerror=alert(&#x27;observation&#x27;)&gt;" in shown
    assert "I think &lt;b&gt;bold&lt;/b&gt; thoughts" in streamed
    assert run_id in listed


async def test_the_list_filters_by_state_and_searches_tasks(world, dev_env):
    page = world
    finished = await start(page, "Say hi to the list")
    waiting = await start(page, "Wait for me, listed")
    await result_of(dev_env.client, finished)
    await until_page_shows(page, waiting, "Shall I go on?")
    waits = (await request(page, "GET", "/?state=waiting")).text
    assert waiting in waits and finished not in waits and "waits for an answer" in waits
    done = (await request(page, "GET", "/?state=finished&q=to+the+list")).text
    assert finished in done and waiting not in done
    assert (await request(page, "GET", "/?state=bogus")).status == 400
    await act(page, run_path(waiting, "cancel"))


async def test_steps_come_on_the_event_stream_and_a_question_is_answered(world, dev_env):
    page = world
    run_id = await start(page, "Pick a colour")
    path = run_path(run_id, "events")
    seen = await events(page, path, lambda seen: any(n == "status" and "Which colour?" in d for n, d in seen))
    steps = [d for n, d in seen if n == "step"]
    assert len(steps) == 1 and 'id="step-1"' in steps[0] and "warming up" in steps[0]
    done = await act(page, run_path(run_id, "answer"), text="blue")
    assert done == {"ok": True, "line": f"answered question 2.1 of {run_id}: Which colour?", "location": None}
    resumed = await events(page, path, lambda seen: False, headers={"Last-Event-ID": "1"})  # a reconnect after step 1
    names = [n for n, _ in resumed]
    assert names[-1] == "end" and [d.split('"')[3] for n, d in resumed if n == "step"] == ["step-2", "step-3"]
    assert any(n == "status" and "finished" in d and "blue it is" in d for n, d in resumed)
    again = await act(page, run_path(run_id, "answer"), text="red")
    assert again["ok"] is False and "has ended" in again["line"], again
    assert (await result_of(dev_env.client, run_id)).final_answer == "blue it is"


async def test_gated_calls_are_approved_and_rejected_from_the_page(world, dev_env):
    page = world
    run_id = await start(page, "Gated work", approve="all")
    await until_page_shows(page, run_id, "call 1.1 waits for approval")
    done = await act(page, run_path(run_id, "decide"), decision="approve", call="1.1")
    assert done["ok"] and done["line"] == f"approved call 1.1 of {run_id}: python_execute", done
    await until_page_shows(page, run_id, "call 2.1 waits for approval")
    wrong = await act(page, run_path(run_id, "decide"), decision="approve", call="1.1")  # not the one waiting
    assert wrong["ok"] is False and "decision refused" in wrong["line"], wrong
    done = await act(page, run_path(run_id, "decide"), decision="reject", call="2.1", reason="not <today>")
    assert done["ok"] and done["line"].startswith(f"rejected call 2.1 of {run_id}"), done
    result = await result_of(dev_env.client, run_id)
    first, second = (record.tool_calls[0] for record in result.steps[:2])
    assert first.approval.action.value == "approve" and first.approval.decided_by.endswith("(run page)")
    assert second.approval.action.value == "reject" and "not <today>" in second.observation
    shown = await until_page_shows(page, run_id, "finished")
    assert "reject by" in shown and "not &lt;today&gt;" in shown


async def test_a_follow_up_a_fork_and_refused_starts(world, dev_env):
    page = world
    run_id = await start(page, "Say hi twice")
    await result_of(dev_env.client, run_id)
    done = await act(page, run_path(run_id, "message"), text="Say hi again")
    assert done["ok"] and "turn 2" in done["line"] and done["location"] == run_path(run_id), done
    # The run is a session now: idle after its second turn, which had one step (terminate).
    shown = await until_page_shows(page, run_id, "turn 2: Say hi again", 'id="step-3"', "idle: waits for a message")
    assert shown.count('class="step"') == 3

    forked = await act(page, run_path(run_id, "fork"), step="3", message="try <again>")
    assert forked["ok"] and forked["line"].startswith(f"forked {run_id} at step 3: new run "), forked
    fork_id = forked["location"].rsplit("/", 1)[1]
    await result_of(dev_env.client, fork_id)
    fork_page = await until_page_shows(page, fork_id, "finished")
    assert f"forked from <a href=\"{run_path(run_id)}\">{run_id}</a> at step 3" in fork_page

    for fields, words in (
        ({"task": "  "}, "the task is empty"),
        ({"task": "x", "kind": "agent:wizard"}, "wizard"),
        ({"task": "x", "max_steps": "0"}, "max steps must be"),
        ({"task": "x", "approve": "sometimes"}, "approval must be"),
        ({"task": "x", "kind": "flow:planning", "agents": "manus,wizard"}, "wizard"),
        ({"task": "x" * 100_001}, "over the limit"),
    ):
        done = await act(page, "/runs", **{"kind": "agent:manus", **fields})
        assert done["ok"] is False and words in done["line"] and "\n" not in done["line"], (fields, done)
    missing = await request(page, "GET", run_path("no-such-run"))
    assert missing.status == 404 and "no run with id" in missing.text
    assert (await act(page, run_path(run_id, "cancel")))["ok"]  # the idle session


async def test_a_form_without_script_comes_back_with_its_line(world):
    page = world
    answer = await request(page, "POST", "/runs", form={"task": "", "kind": "agent:manus"})
    assert answer.status == 303 and answer.headers["location"].startswith("/?said=")
    back = await request(page, "GET", answer.headers["location"])
    assert "the task is empty" in back.text
    assert "the task is empty" not in (await request(page, "GET", answer.headers["location"])).text  # said once


# ---- screenshots --------------------------------------------------------------------------


async def test_screenshots_come_from_the_runs_directory_only(world, dev_env, settings):
    page = world
    run_id = await start(page, "Say hi with pictures")
    await result_of(dev_env.client, run_id)
    shots = settings.workspace_root / workspace_name_for(run_id) / "browser"
    shots.mkdir(parents=True, exist_ok=True)
    (shots / "step-0001-1.jpg").write_bytes(JPEG)
    (settings.workspace_root / "secret.jpg").write_bytes(JPEG)
    os.symlink(settings.workspace_root / "secret.jpg", shots / "step-0001-2.jpg")
    os.mkfifo(shots / "step-0001-3.jpg")
    (shots / "step-0001-4.jpg").write_text("<script>alert(1)</script>")

    served = await request(page, "GET", run_path(run_id, "screenshot", "step-0001-1.jpg"))
    assert served.status == 200 and served.headers["content-type"] == "image/jpeg" and served.body == JPEG
    assert served.headers["x-content-type-options"] == "nosniff"
    for name in ("step-0001-2.jpg", "step-0001-3.jpg", "step-0001-4.jpg", "..%2Fsecret.jpg", "secret.jpg"):
        refused = await request(page, "GET", run_path(run_id, "screenshot") + "/" + name)
        assert refused.status == 404 and refused.body != JPEG, name
    traversal = await request(page, "GET", f"/run/{run_id}/screenshot/../../secret.jpg")
    assert traversal.status == 404
    other = await request(page, "GET", run_path("no-such-run", "screenshot", "step-0001-1.jpg"))
    assert other.status == 404
    await asyncio.sleep(0)


async def test_a_flows_page_shows_its_plan_and_links_its_step_runs(world, dev_env, fake_llm):
    from tests.test_planning_flow import FlowScript, plan_reply

    page = world
    fake_llm.responder = FlowScript(
        plan_reply("Warm up", "Ask the user"),
        {1: [terminate("warm")], 2: [Reply(tool_calls=[call("ask_human", {"inquire": "Flow asks?"})]), terminate("ok")]},
        summary="Summary: <all> went well.",
    )
    done = await act(page, "/runs", task="Plan it", kind="flow:planning", agents="manus")
    assert done["ok"] and "planning flow (manus)" in done["line"], done
    flow_id = done["location"].rsplit("/", 1)[1]
    step_run = f"{flow_id}/step-2"
    link = f'<a href="{run_path(step_run)}">{step_run}</a>'
    shown = await until_page_shows(page, flow_id, f"working: {link}")
    assert "[✓]</span> Warm up" in shown and "%2F" in run_path(step_run)
    child = await until_page_shows(page, step_run, "Flow asks?")
    assert f'step of flow <a href="{run_path(flow_id)}">{flow_id}</a>' in child
    assert "follow-up" not in child  # a flow's step takes no follow-up
    asking = await until_page_shows(page, flow_id, "Flow asks?")  # the flow's page has its step's question
    assert f"(of {link})" in asking and "waits for an answer" in asking
    answered = await act(page, run_path(flow_id, "answer"), text="yes")  # the flow's working step takes it
    assert answered["ok"] and f"of {step_run}" in answered["line"], answered
    finished = await until_page_shows(page, flow_id, "Summary: &lt;all&gt; went well.")
    assert "[✓]" in finished and "finished" in finished


async def test_think_events_from_the_token_source_reach_the_stream_inert(world, monkeypatch):
    """The plug (runtime/run_page/think_tokens.py SOURCE) as the live feed will
    fill it: what it yields for the run's directory is on the stream, as JSON
    text the script writes as text."""
    from types import SimpleNamespace

    from runtime.run_page import think_tokens

    page = world
    run_id = await start(page, "Wait for me, tokens")
    await until_page_shows(page, run_id, "Shall I go on?")
    asked = []

    async def follow_think(root: Path, run_dir: str, step: int | None):
        asked.append(run_dir)
        for kind, text in (("think_started", ""), ("token", "<b>Hel\x1b[2Jlo</b>"), ("think_ended", "")):
            yield SimpleNamespace(run_id=run_id, step=2, kind=kind, text=text, channel="content", at=0.0)
        await asyncio.Event().wait()  # a live feed stays open

    monkeypatch.setattr(think_tokens, "SOURCE", follow_think)
    seen = await events(page, run_path(run_id, "events"), lambda seen: [n for n, _ in seen].count("token") == 3)
    tokens = [json.loads(d) for n, d in seen if n == "token"]
    assert [t["kind"] for t in tokens] == ["think_started", "token", "think_ended"]
    assert tokens[1]["text"] == "<b>Hello</b>" and asked == [workspace_name_for(run_id)]
    await act(page, run_path(run_id, "cancel"))
