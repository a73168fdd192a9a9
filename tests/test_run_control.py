"""The starter's run-control commands against the dev server, and what the Web UI
shows of a finished run (details, summaries, search attributes)."""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest
from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.converter import DataConverter

from agent_model.workspace_names import workspace_name_for
from agent_model.run import AgentRunInput
from runtime.worker_factory import build_worker
from testkit.cli import InProcessCli, cli_environment
from testkit.e2e import child_env, server_address, wait_until
from testkit.fake_openai import Reply, call, python, terminate
from testkit.settings import make_settings
from tests.test_e2e import appending_code, tagged
from workflows import search_attributes
from workflows.agent import AgentWorkflow

class Harness:
    """An in-process worker on the dev server, and starter.py's commands as the user runs them."""

    def __init__(self, dev_env, fake_llm, tmp_path, cli: InProcessCli):
        self.dev_env, self.fake, self.tmp_path, self.in_process = dev_env, fake_llm, tmp_path, cli
        self.settings = make_settings(fake_llm.base_url, tmp_path / "workspace")
        self.env = child_env(
            tmp_path, address=server_address(dev_env), task_queue=self.settings.task_queue, base_url=fake_llm.base_url
        )

    async def start(self, task: str = "the task", agent: str = "manus"):
        return await self.dev_env.client.start_workflow(
            AgentWorkflow.run,
            AgentRunInput(task=task, agent=agent),
            id=f"ctl-{uuid.uuid4().hex[:8]}",
            task_queue=self.settings.task_queue,
            static_summary=task,
            search_attributes=search_attributes.initial(agent),
        )

    async def cli(self, *args: str, expect: int = 0) -> str:
        never = [] if args[0] in ("list", "result") else ["--worker", "never"]
        done = await self.in_process.in_thread(*args, *never, env_extra=cli_environment(self.env))
        assert done.returncode == expect, done
        if expect == 2:
            assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr, done.stderr
            return done.stderr
        return done.stdout


@pytest.fixture
async def harness(dev_env, fake_llm, tmp_path, cli):
    h = Harness(dev_env, fake_llm, tmp_path, cli)
    async with build_worker(dev_env.client, h.settings):
        yield h


async def wait_for_question(handle):
    await wait_until(lambda: handle.query(AgentWorkflow.pending_question), 30, "the question", 0.1)


async def test_answer_result_show_and_list(harness, fake_llm):
    fake_llm.turns = [Reply(content="I need to ask.", tool_calls=[call("ask_human", {"inquire": "Which colour?"})]), terminate("blue it is")]
    handle = await harness.start("Pick a colour")
    await wait_for_question(handle)

    out = await harness.cli("answer", handle.id, "blue")
    assert f"answered question 1.1 of {handle.id}: Which colour?" in out
    result = await handle.result()
    assert result.final_answer == "blue it is"

    assert "has ended" in await harness.cli("answer", handle.id, "again", expect=2)
    assert "no run with id 'nope'" in await harness.cli("answer", "nope", "x", expect=2)
    assert "no run with id 'nope'" in await harness.cli("show", "nope", expect=2)

    out = await harness.cli("result", handle.id)
    assert "finished: the agent ended its task (2 steps, " in out and out.rstrip().endswith("blue it is")

    out = await harness.cli("show", handle.id)
    assert "── step 1 ──" in out and "thought: I need to ask." in out
    assert '→ ask_human({"inquire": "Which colour?"})' in out and "← The user answered: blue" in out

    out = await harness.cli("list")
    (row,) = [line for line in out.splitlines() if line.startswith(handle.id)]
    assert row.split()[1:5] == ["manus", "finished", "2", row.split()[4]] and row.endswith("Pick a colour")
    assert out.splitlines()[0].split() == ["RUN", "ID", "AGENT/FLOW", "STATE", "STEP", "AGE", "TASK"]


async def test_answer_without_a_waiting_question_is_an_error(harness, fake_llm):
    fake_llm.turns = [Reply(tool_calls=[call("python_execute", {"code": "import time; time.sleep(30)"})]), terminate("x")]
    handle = await harness.start()
    await wait_until(lambda: len(fake_llm.requests) >= 1, 30, "the first think")
    assert "has no question waiting" in await harness.cli("answer", handle.id, "hello", expect=2)
    out = await harness.cli("cancel", handle.id)
    assert f"run {handle.id} ended: CANCELLED" in out
    assert "has already ended" in await harness.cli("cancel", handle.id, expect=2)
    out = await harness.cli("list")
    (row,) = [line for line in out.splitlines() if line.startswith(handle.id)]
    assert row.split()[2] == "cancelled"


async def test_rewind_keeps_the_steps_before_and_reruns_the_rest(harness, fake_llm, tmp_path):
    log = tmp_path / "executions.log"
    fake_llm.turns = [
        python(appending_code(log, "step1", "print('one')\n")),
        python(appending_code(log, "step2", "print('two')\n")),
        terminate("three steps done"),
    ]
    handle = await harness.start()
    first = await handle.result()
    assert first.steps_taken == 3 and len(fake_llm.requests) == 3
    before = len(fake_llm.requests)

    out = await harness.cli("rewind", handle.id, "--to-step", "1")
    assert f"rewound {handle.id} to the end of step 1: new run" in out
    assert out.rstrip().endswith("three steps done")

    again = fake_llm.requests[before:]
    assert [r.turn for r in again] == [1, 2]  # steps 2 and 3 asked the model again, step 1 did not
    first_again = again[0].messages
    assert first_again[-1]["role"] == "user"  # the next-step prompt of step 2...
    tool_reply = [m for m in first_again if m["role"] == "tool"]
    assert [m["content"].strip() for m in tool_reply] == ["one"]  # ...after step 1's memory
    assert [len(tagged(log, t)) for t in ("step1", "step2")] == [1, 2]  # step 1's tool not re-run

    new = await harness.dev_env.client.get_workflow_handle(handle.id).result()
    assert new["final_answer"] == "three steps done"
    assert "--to-step must be from 0 to 2" in await harness.cli("rewind", handle.id, "--to-step", "3", expect=2)
    assert "required: --to-step" in await harness.cli("rewind", handle.id, expect=2)


async def test_a_finished_run_tells_its_story(harness, fake_llm, dev_env):
    fake_llm.turns = [
        python("print(17*23)"),
        Reply(tool_calls=[call("str_replace_editor", {"command": "create", "path": "report.md", "file_text": "391\n"})]),
        terminate("391"),
    ]
    handle = await harness.start("Compute 17*23 and write report.md")
    await handle.result()

    description = await handle.describe()
    assert await description.static_summary() == "Compute 17*23 and write report.md"
    attributes = description.typed_search_attributes
    assert attributes.get(search_attributes.AGENT_NAME) == "manus"
    assert attributes.get(search_attributes.AGENT_STATE) == "FINISHED"
    assert attributes.get(search_attributes.AGENT_STEP) == 3

    details = (await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)).current_details
    for expected in ("**agent** manus", "**state** FINISHED", "**step** 3/20", "**tokens**", "**last tool** `terminate`"):
        assert expected in details, details

    converter = DataConverter.default.payload_converter
    summaries = []
    async for event in handle.fetch_history_events():
        # The directory is made by a local activity, whose summary is on its marker.
        if event.HasField("activity_task_scheduled_event_attributes") or (
            event.HasField("marker_recorded_event_attributes") and event.user_metadata.HasField("summary")
        ):
            summaries.append(converter.from_payload(event.user_metadata.summary, str))
    assert summaries == [
        f"prepare workspace {workspace_name_for(handle.id)}",
        "think 1/20 · manus",
        "python_execute: print(17*23)",
        "think 2/20 · manus",
        "str_replace_editor: create report.md",
        "think 3/20 · manus",
    ]

    await asyncio.sleep(1)  # visibility is eventually consistent
    found = [w.id async for w in dev_env.client.list_workflows(f'AgentState = "FINISHED" AND AgentName = "manus"')]
    assert handle.id in found


async def test_agent_step_is_published_every_few_steps_and_exactly_at_the_end(harness, fake_llm):
    steps = 2 * search_attributes.AGENT_STEP_INTERVAL + 2
    fake_llm.turns = [python(f"print({i})") for i in range(steps - 1)] + [terminate("done")]
    handle = await harness.start()
    await handle.result()

    published = []
    async for event in handle.fetch_history_events():
        if event.HasField("upsert_workflow_search_attributes_event_attributes"):
            fields = event.upsert_workflow_search_attributes_event_attributes.search_attributes.indexed_fields
            if "AgentStep" in fields or "AgentState" in fields:  # not the SDK's TemporalChangeVersion
                published.append((json.loads(fields["AgentStep"].data) if "AgentStep" in fields else None,
                                  json.loads(fields["AgentState"].data) if "AgentState" in fields else None))
    interval = search_attributes.AGENT_STEP_INTERVAL
    assert published == [(interval, None), (2 * interval, None), (steps, "FINISHED")]
    description = await handle.describe()
    assert description.typed_search_attributes.get(search_attributes.AGENT_STEP) == steps
