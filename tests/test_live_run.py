"""Live thoughts in a whole run on the dev server: a follower reads a think's
tokens while the think activity is still running, the history keeps only
the final message, and neither streaming off nor a lost journal changes the run."""

from __future__ import annotations

import asyncio
import base64
import threading
import uuid

from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHandle

from agent_model.live_events import LIVE_DIR_NAME, LiveEvent, journal_dir_name
from agent_model.profiles import AgentProfile
from agent_model.run import AgentRunInput, AgentRunResult
from config.live_settings import LiveSettings
from runtime.follow import run_directory
from runtime.live_feed import follow_think
from runtime.worker_factory import build_worker
from testkit.fake_openai import Reply, call, terminate
from testkit.run_results import final_result
from testkit.settings import make_settings
from workflows.agent import AgentWorkflow

PROFILE = AgentProfile(
    name="live-tester", system_prompt="You work in {directory}.", tools=["str_replace_editor", "terminate"], max_steps=4
)
THOUGHT = "First I look at the directory, then I answer."
WAIT = 30.0
"""Bound on waits for what takes a second or two."""


def script() -> list[Reply]:
    return [
        Reply(content=THOUGHT, tool_calls=[call("str_replace_editor", {"command": "view", "path": "."})]),
        terminate("the directory is empty"),
    ]


async def start(env, settings, run_id: str, workspace: str | None = None) -> WorkflowHandle:
    return await env.client.start_workflow(
        AgentWorkflow.run, AgentRunInput(task="look around", profile=PROFILE, workspace=workspace), id=run_id,
        task_queue=settings.task_queue, result_type=AgentRunResult,
    )


async def think_completions(handle: WorkflowHandle) -> int:
    """How many think activities the history shows completed."""
    scheduled, done = {}, 0
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            scheduled[event.event_id] = event.activity_task_scheduled_event_attributes.activity_type.name
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            done += scheduled[event.activity_task_completed_event_attributes.scheduled_event_id] == "think"
    return done


async def history_text(handle: WorkflowHandle) -> str:
    """Every payload of the run's history, decoded, one after the other."""
    texts: list[str] = []

    def walk(value) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                if key == "data" and isinstance(item, str):
                    texts.append(base64.b64decode(item).decode("utf-8", "replace"))
                else:
                    walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    walk((await handle.fetch_history()).to_json_dict())
    return "\n".join(texts)


async def test_a_follower_reads_the_thought_before_the_think_completes(dev_env, fake_llm, tmp_path):
    gate = threading.Event()
    fake_llm.turns, fake_llm.chunk_gate, fake_llm.chunk_chars = script(), gate, 5
    settings = make_settings(fake_llm.base_url, tmp_path / "workspace")
    run_id = f"live-{uuid.uuid4().hex[:8]}"
    seen: list[LiveEvent] = []
    first_token = asyncio.Event()

    async def follow() -> None:
        async for event in follow_think(settings.workspace_root, journal_dir_name(run_id), step=1):
            seen.append(event)
            if event.kind == "token":
                first_token.set()

    async with build_worker(dev_env.client, settings):
        handle = await start(dev_env, settings, run_id)
        follower = asyncio.ensure_future(follow())
        try:
            await asyncio.wait_for(first_token.wait(), WAIT)
            # The fake holds the stream after its first piece: the think cannot have completed.
            assert await think_completions(handle) == 0
            assert seen[0].kind == "think_started" and seen[0].step == 1
            # The first piece, but for an end that could begin the worker's key ("test-key"): held back.
            assert seen[1].text and THOUGHT[:5].startswith(seen[1].text)
            gate.set()
            await asyncio.wait_for(follower, WAIT)  # it ends with step 1's think
            result = await final_result(handle)
        finally:
            gate.set()
            follower.cancel()
    assert result.succeeded
    assert "".join(e.text for e in seen if e.channel == "content") == THOUGHT
    assert seen[-1].kind == "think_ended" and {e.run_id for e in seen} == {run_id}
    history = await history_text(handle)
    # The history has the final message, once per think result, and no live event.
    assert THOUGHT in history
    for marker in ("think_started", "think_ended", '"channel"'):
        assert marker not in history, marker
    assert result.steps[0].thought == THOUGHT


async def test_with_streaming_off_the_run_is_the_same_and_writes_no_journal(dev_env, fake_llm, tmp_path):
    fake_llm.turns = script()
    settings = make_settings(fake_llm.base_url, tmp_path / "workspace").model_copy(
        update={"live": LiveSettings(stream=False)}
    )
    async with build_worker(dev_env.client, settings):
        result = await final_result(await start(dev_env, settings, f"plain-{uuid.uuid4().hex[:8]}"))
    assert result.succeeded and result.steps[0].thought == THOUGHT
    assert [bool(r.body.get("stream")) for r in fake_llm.requests] == [False, False]
    assert not (settings.workspace_root / LIVE_DIR_NAME).exists()


async def test_losing_the_journal_mid_run_does_not_touch_the_run(dev_env, fake_llm, tmp_path):
    gate = threading.Event()
    fake_llm.turns, fake_llm.chunk_gate = script(), gate
    settings = make_settings(fake_llm.base_url, tmp_path / "workspace")
    live = settings.workspace_root / LIVE_DIR_NAME
    run_id = f"lost-{uuid.uuid4().hex[:8]}"
    async with build_worker(dev_env.client, settings):
        handle = await start(dev_env, settings, run_id)
        try:
            async def journal_written() -> None:
                while not (live / journal_dir_name(run_id) / "think.jsonl").exists():
                    await asyncio.sleep(0.02)

            await asyncio.wait_for(journal_written(), WAIT)
            # Mid-think the journal's directory goes, and a file takes its place.
            for path in sorted(live.rglob("*"), reverse=True):
                path.rmdir() if path.is_dir() else path.unlink()
            live.rmdir()
            live.write_text("not a directory")
        finally:
            gate.set()
        result = await final_result(handle)
    assert result.succeeded and result.steps[0].thought == THOUGHT
    assert len(result.steps) == 2 and live.read_text() == "not a directory"


async def test_a_run_in_another_run_s_directory_writes_the_journal_there(dev_env, fake_llm, tmp_path):
    """A flow's step runs work in the flow's directory: their thinks' journal is
    named after it, and the starter finds it from the run's input."""
    fake_llm.turns = script()
    settings = make_settings(fake_llm.base_url, tmp_path / "workspace")
    run_id = f"flow-x/step-{uuid.uuid4().hex[:6]}"
    async with build_worker(dev_env.client, settings):
        handle = await start(dev_env, settings, run_id, workspace="flow-x")
        result = await final_result(handle)
    assert result.succeeded
    journals = sorted(p.parent.name for p in (settings.workspace_root / LIVE_DIR_NAME).glob("*/think.jsonl"))
    assert journals == ["flow-x"]
    assert await run_directory(handle, dev_env.client.data_converter) == "flow-x"
    plain = dev_env.client.get_workflow_handle("no-such-run/at all")
    assert await run_directory(plain, dev_env.client.data_converter) == journal_dir_name("no-such-run/at all")
