"""End to end: runs whose model drives browser_use against the fixture site, on
the session's dev server, with real Chromium in the tool sandbox.

- one run fills in a form, extracts with its own LLM call and terminates: the
  page lives on the worker that opened it (its own task queue), screenshots
  are files and reach the model as images but never history;
- the worker that holds the page is SIGKILLed in the middle of the session: a
  new worker restores the tabs, the model is told, and the run finishes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib.util
import json
import os
import uuid
from pathlib import Path

import pytest
from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError, WorkflowHandle

from activities.browser.sessions import BrowserSessions
from agent_model.profiles import get_profile
from agent_model.run import AgentRunInput, AgentRunResult
from agent_model.workspace_names import workspace_name_for
from config.settings import BrowserSettings, WebSettings
from runtime.worker_factory import build_worker
from testkit.e2e import (
    child_env,
    closed_before_the_run,
    server_address,
    start_worker,
    unique_queue,
    wait_for_activity_start,
    wait_until,
)
from testkit.fake_openai import FakeOpenAI, Reply, call, terminate, turn_of
from testkit.fake_site import FakeSite
from testkit.settings import make_settings
from prompts.browser import EXTRACT_SYSTEM_PROMPT, SESSION_LOST_RESTORED
from workflows.agent import AgentWorkflow

from tests.test_browser_engine import BROWSER_MISSING

needs_browser = pytest.mark.skipif(bool(BROWSER_MISSING), reason=BROWSER_MISSING or "")


def browse(action: str, **arguments) -> Reply:
    return Reply(tool_calls=[call("browser_use", {"action": action, **arguments})])


def browser_profile(max_steps: int = 10):
    return get_profile("browser").model_copy(update={"max_steps": max_steps})


@pytest.fixture
def site():
    served = FakeSite().start()
    yield served
    served.stop()


def payload_text(history, activity: str) -> str:
    """The inputs and results of every `activity` of the run, decoded."""
    kinds, payloads = {}, []
    for e in history.events:
        if e.HasField("activity_task_scheduled_event_attributes"):
            scheduled = e.activity_task_scheduled_event_attributes
            kinds[e.event_id] = scheduled.activity_type.name
            if scheduled.activity_type.name == activity:
                payloads += [p.data.decode() for p in scheduled.input.payloads]
        elif e.HasField("activity_task_completed_event_attributes"):
            completed = e.activity_task_completed_event_attributes
            if kinds.get(completed.scheduled_event_id) == activity:
                payloads += [p.data.decode() for p in completed.result.payloads]
    return "\n".join(payloads)


def site_settings(fake_llm, tmp_path, site):
    """A worker with the tool sandbox on, allowed to reach the fixture site."""
    return make_settings(fake_llm.base_url, tmp_path / "workspace", tool_sandbox="auto").model_copy(
        update={"web": WebSettings(allow=(site.origin,))}
    )


def scheduled_browser_actions(history) -> list[tuple[str, str]]:
    """(summary-free) task queue of every browser_act the run scheduled, in order."""
    return [
        (e.activity_task_scheduled_event_attributes.task_queue.name, e.activity_task_scheduled_event_attributes.activity_type.name)
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
        and e.activity_task_scheduled_event_attributes.activity_type.name.startswith("browser_")
    ]


@needs_browser
async def test_a_run_fills_a_form_extracts_and_keeps_screenshots_out_of_history(dev_env, fake_llm, site, tmp_path):
    settings = site_settings(fake_llm, tmp_path, site)
    form = site.url("/form")
    turns = [
        browse("go_to_url", url=form),
        browse("input_text", index=0, text="durable"),
        browse("click_element", index=1),
        browse("extract_content", goal="what was sent"),
        terminate("sent"),
    ]

    def respond(body: dict, attempt: int) -> Reply:
        if body["messages"][0].get("content") == EXTRACT_SYSTEM_PROMPT:  # the extraction's own call
            return Reply(content="The page says durable was sent.")
        return turns[turn_of(body)]

    fake_llm.responder = respond
    workflow_id = f"browser-{uuid.uuid4().hex[:8]}"
    async with build_worker(dev_env.client, settings) as worker:
        handle = await dev_env.client.start_workflow(
            AgentWorkflow.run,
            AgentRunInput(task="Send 'durable' with the form.", profile=browser_profile()),
            id=workflow_id,
            task_queue=settings.task_queue,
        )
        result: AgentRunResult = await asyncio.wait_for(handle.result(), 90)
        own_queue = worker.own.task_queue if worker.own is not None else None
    history = await handle.fetch_history()

    assert result.succeeded, result.note
    went, typed, clicked, extracted = (step.tool_calls[0] for step in result.steps[:4])
    assert not any(c.error for c in (went, typed, clicked, extracted)), [c.observation for c in (went, typed, clicked)]
    assert "You sent: durable" in clicked.observation
    assert extracted.observation.startswith(f"Extracted from {site.url('/submitted')}")
    assert "The page says durable was sent." in extracted.observation

    extraction = fake_llm.requests[4]
    assert "You sent: durable" in json.dumps(extraction.messages)
    assert extraction.tools is None

    # The next-step prompt shows the browser; the newest screenshot is an image part.
    second = fake_llm.requests[1].messages
    assert any("Browser: " + form in json.dumps(m) for m in second)
    images = [p for m in second if isinstance(m.get("content"), list) for p in m["content"] if p.get("type") == "image_url"]
    assert len(images) == 1 and images[0]["image_url"]["url"].startswith("data:image/")

    # The page lived on the worker that opened it: the first action went to any
    # worker, every later one to that worker's own queue.
    queues = [queue for queue, kind in scheduled_browser_actions(history) if kind == "browser_act"]
    assert queues[0] == settings.task_queue
    assert own_queue is not None and set(queues[1:]) == {own_queue}
    assert ("browser_close" in {kind for _, kind in scheduled_browser_actions(history)})

    run_dir = settings.workspace_root / workspace_name_for(workflow_id)
    shots = sorted(p.name for p in (run_dir / "browser").iterdir())
    assert shots[:2] == ["step-0001-1.jpg", "step-0002-1.jpg"]
    text = history.to_json()
    assert "data:image" not in text
    # Observations are in history as the actions' results; the thinks that
    # follow name them by digest instead of carrying them again.
    assert 'placeholder=\\"your words\\"' in payload_text(history, "browser_act")
    assert "your words" not in payload_text(history, "think")
    first_shot = (run_dir / "browser" / "step-0001-1.jpg").read_bytes()
    import base64

    assert base64.b64encode(first_shot[:300]).decode()[:200] not in text


@pytest.mark.e2e  # starter.py/worker.py processes on the dev server
@needs_browser
async def test_a_killed_worker_s_browser_session_is_restored_and_the_run_finishes(dev_env, site, tmp_path):
    """The worker holding the page is SIGKILLed between two actions (while the
    model thinks); the next action waits on that worker's queue until its
    schedule-to-start timeout, then goes to the new worker, which reopens the
    tabs and runs it; the model is told the session was restored."""
    queue = unique_queue("browser-kill")
    config = tmp_path / "config.toml"
    config.write_text(f'[web]\nallow = ["{site.origin}"]\n', encoding="utf-8")
    logs = tmp_path / "logs"
    logs.mkdir()
    form, second = site.url("/form"), site.url("/page2")
    turns = [
        browse("go_to_url", url=form),
        browse("open_tab", url=second),
        browse("switch_tab", tab_id=0),
        terminate("done"),
    ]

    def respond(body: dict, attempt: int) -> Reply:
        turn = turn_of(body)
        if turn == 2 and attempt == 0:  # the first worker dies while this reply is held back
            return dataclasses.replace(turns[turn], delay=60.0)
        return turns[turn]

    with FakeOpenAI(responder=respond) as fake:
        env = child_env(
            tmp_path, address=server_address(dev_env), task_queue=queue, base_url=fake.base_url,
            extra={"DURABLE_MANUS_TOOL_SANDBOX": "auto", "DURABLE_MANUS_CONFIG": str(config)},
        )
        first = start_worker(env, logs, "first")
        replacement = None
        try:
            handle: WorkflowHandle = await dev_env.client.start_workflow(
                AgentWorkflow.run,
                AgentRunInput(task="Look at two pages.", profile=browser_profile()),
                id=f"browser-kill-{uuid.uuid4().hex[:8]}",
                task_queue=queue,
            )
            await wait_until(lambda: any(r.turn == 2 for r in fake.requests), 60, "the third think")
            browsers = [pid for pid in descendants(first.pid) if is_chromium(pid)]
            assert browsers, "the first worker's browser should be running"
            first.kill()
            await wait_until(lambda: not any(is_chromium(pid) for pid in browsers), 15, "the killed worker's browser to go")
            replacement = start_worker(env, logs, "replacement")
            result: AgentRunResult = await asyncio.wait_for(handle.result(), 90)
        finally:
            first.kill()
            if replacement is not None:
                await replacement.stop()

    assert result.succeeded, result.note
    opened, switched = result.steps[1].tool_calls[0], result.steps[2].tool_calls[0]
    assert "lost" not in opened.observation
    assert not switched.error, switched.observation
    assert switched.observation.startswith("Switched to tab [0]") and form in switched.observation
    # The note is the workflow's own message, after the tool's (which memory takes as its worker made it).
    seen = fake.requests[-1].messages
    after = next(i for i, m in enumerate(seen) if m["role"] == "tool" and "Switched to tab [0]" in m["content"]) + 1
    assert seen[after] == {"role": "user", "content": SESSION_LOST_RESTORED}


def descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parent = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(parent, []).append(int(entry))
    found, queue = [], [root]
    while queue:
        for child in children.get(queue.pop(), []):
            found.append(child)
            queue.append(child)
    return found


def is_chromium(pid: int) -> bool:
    try:
        return b"chrom" in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
    except OSError:
        return False


def test_the_browser_profile_and_manus_have_browser_use():
    assert "browser_use" in get_profile("browser").tools
    assert "browser_use" in get_profile("manus").tools


def test_a_worker_without_chromium_refuses_the_tool_in_one_line(tmp_path):
    settings = BrowserSettings(chrome_instance_path=str(tmp_path / "no-such-chromium"))
    from activities.tools.sandbox import ToolSandbox
    from activities.web.access import WebAccess
    from activities.workspace import Workspace

    sessions = BrowserSessions(settings, Workspace(tmp_path), ToolSandbox.none(), WebAccess(), None)
    problem = sessions.problem()
    assert problem is not None and "\n" not in problem
    # Without Playwright that is said first; otherwise the missing executable.
    assert ("playwright" in problem) if importlib.util.find_spec("playwright") is None else ("no-such-chromium" in problem)


@needs_browser
async def test_cancel_during_a_browser_action_ends_the_run_and_closes_its_browser(dev_env, fake_llm, site, tmp_path):
    settings = site_settings(fake_llm, tmp_path, site)
    fake_llm.turns = [browse("go_to_url", url=site.url("/")), browse("wait", seconds=30), terminate("never")]
    async with build_worker(dev_env.client, settings) as worker:
        handle = await dev_env.client.start_workflow(
            AgentWorkflow.run,
            AgentRunInput(task="Wait a while.", profile=browser_profile()),
            id=f"browser-cancel-{uuid.uuid4().hex[:8]}",
            task_queue=settings.task_queue,
        )
        await wait_until(lambda: len(fake_llm.requests) >= 2, 30, "the second think")

        await wait_for_activity_start(handle, "browser_act")
        cancelled_at = asyncio.get_running_loop().time()
        await handle.cancel()
        with pytest.raises(WorkflowFailureError):
            await asyncio.wait_for(handle.result(), 15)
        took = asyncio.get_running_loop().time() - cancelled_at
        assert worker.browsers is not None and worker.browsers.open_sessions == []
    assert took < 5, took
    description = await handle.describe()
    assert description.status == WorkflowExecutionStatus.CANCELED
    # The run ended only once the action had stopped (WAIT_CANCELLATION_COMPLETED).
    assert closed_before_the_run(await handle.fetch_history(), "browser_act")


@needs_browser
async def test_hostile_arguments_are_observations_and_reach_no_browser(dev_env, fake_llm, tmp_path):
    settings = make_settings(fake_llm.base_url, tmp_path / "workspace", tool_sandbox="auto")
    fake_llm.turns = [
        browse("go_to_url", url="file:///etc/passwd"),
        browse("go_to_url", url="javascript:alert(1)"),
        browse("click_element", index=10**12),
        browse("input_text", index=0, text="x" * 20_000),
        browse("teleport"),
        browse("go_to_url", url="http://127.0.0.1:9/"),  # loopback: refused by the [web] rules
        terminate("done"),
    ]
    async with build_worker(dev_env.client, settings):
        handle = await dev_env.client.start_workflow(
            AgentWorkflow.run,
            AgentRunInput(task="Misbehave.", profile=browser_profile()),
            id=f"browser-hostile-{uuid.uuid4().hex[:8]}",
            task_queue=settings.task_queue,
        )
        result: AgentRunResult = await asyncio.wait_for(handle.result(), 60)
    assert result.succeeded, result.note
    observations = [step.tool_calls[0] for step in result.steps[:6]]
    assert all(c.error for c in observations), [c.observation for c in observations]
    assert "http:// or https://" in observations[0].observation and "http:// or https://" in observations[1].observation
    assert "from 0 to" in observations[2].observation
    assert "longer than" in observations[3].observation
    assert "action must be one of" in observations[4].observation
    refused = observations[5].observation
    assert "127.0.0.1" in refused and len(refused) < 2000, refused
    history = await handle.fetch_history()
    # Only the last one reached a browser.
    assert sum(1 for _, kind in scheduled_browser_actions(history) if kind == "browser_act") == 1


@needs_browser
async def test_a_run_that_continues_as_new_keeps_its_live_page(dev_env, fake_llm, site, tmp_path):
    settings = site_settings(fake_llm, tmp_path, site)
    fake_llm.turns = [browse("go_to_url", url=site.url("/long")), browse("scroll_down"), terminate("done")]
    async with build_worker(dev_env.client, settings) as worker:
        handle = await dev_env.client.start_workflow(
            AgentWorkflow.run,
            AgentRunInput(task="Scroll.", profile=browser_profile(), steps_per_run=1),
            id=f"browser-continued-{uuid.uuid4().hex[:8]}",
            task_queue=settings.task_queue,
        )
        result: AgentRunResult = await asyncio.wait_for(handle.result(), 60)
        own_queue = worker.own.task_queue
    assert result.succeeded, result.note
    scrolled = result.steps[1].tool_calls[0]
    assert not scrolled.error and "reopened" not in scrolled.observation, scrolled.observation
    second = await dev_env.client.get_workflow_handle(handle.id).fetch_history()  # the last execution
    assert [queue for queue, kind in scheduled_browser_actions(second)] == [own_queue]  # browser_close
    assert "Browser: " + site.url("/long") in json.dumps(fake_llm.requests[1].messages)
