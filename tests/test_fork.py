"""`fork` and the files of `rewind`: a new run from a run's state and files at
the end of step N (runtime/fork.py), on the dev server with an in-process
worker, starter.py's commands as the user runs them, and the fake LLM."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from temporalio.api.sdk.v1 import WorkflowMetadata

from agent_model.run import AgentRunInput
from agent_model.workspace_names import workspace_name_for
from config.settings import LLMSettings
from runtime import fork
from runtime.worker_factory import build_worker
from testkit.cli import InProcessCli, cli_environment
from testkit.e2e import child_env, server_address, wait_until
from testkit.fake_openai import Reply, call, python, terminate
from testkit.settings import make_settings, write_config
from tests.test_planning_flow import FlowScript, plan_reply
from agent_model.flow import PlanningFlowInput
from workflows import search_attributes
from workflows.agent import AgentWorkflow
from workflows.planning import PlanningFlowWorkflow

WRITE_STEP_1 = "open('a.txt','w').write('v1'); open('b.txt','w').write('keep')"
WRITE_STEP_2 = "import os; open('a.txt','w').write('v2'); os.remove('b.txt'); open('c.txt','w').write('new')"
LIST_FILES = (
    "import os, json; print(json.dumps({n: open(n).read() for n in sorted(os.listdir('.')) if os.path.isfile(n)}))"
)
AT_STEP_1 = {"a.txt": "v1", "b.txt": "keep"}
AT_STEP_2 = {"a.txt": "v2", "c.txt": "new"}


def files(directory: Path) -> dict[str, str]:
    """The run directory's files (not the tools' own .tmp directory)."""
    return {p.name: p.read_text() for p in sorted(directory.iterdir()) if p.is_file()}


def listed(observation: str) -> dict[str, str]:
    return json.loads(observation.strip())


class Harness:
    """An in-process worker on the dev server, and starter.py's commands."""

    def __init__(self, dev_env, fake_llm, tmp_path: Path, cli: InProcessCli):
        self.dev_env, self.fake, self.in_process = dev_env, fake_llm, cli
        self.root = tmp_path / "workspace"
        self.settings = make_settings(fake_llm.base_url, self.root)
        self.settings.llm["small"] = LLMSettings(model="gpt-4o-mini", base_url=fake_llm.base_url, api_key="test-key")
        self.config = write_config(
            tmp_path,
            f'[llm]\nmodel = "gpt-4o"\nbase_url = "{fake_llm.base_url}"\napi_key = "test-key"\n'
            f'[llm.small]\nmodel = "gpt-4o-mini"\nbase_url = "{fake_llm.base_url}"\napi_key = "test-key"\n',
        )
        self.env = child_env(
            tmp_path, address=server_address(dev_env), task_queue=self.settings.task_queue, base_url=fake_llm.base_url,
            workspace_root=self.root,
        )

    async def start(self, task: str = "write the files", agent: str = "manus"):
        return await self.dev_env.client.start_workflow(
            AgentWorkflow.run,
            AgentRunInput(task=task, agent=agent),
            id=f"origin-{uuid.uuid4().hex[:8]}",
            task_queue=self.settings.task_queue,
            search_attributes=search_attributes.initial("manus"),
        )

    async def cli(self, *args: str, expect: int = 0) -> str:
        extra = [] if args[0] in ("list", "result") else ["--worker", "never", "--config", str(self.config)]
        done = await self.in_process.in_thread(*args, *extra, env_extra=cli_environment(self.env))
        assert done.returncode == expect, done
        if expect == 2:
            assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr, done.stderr
            return done.stderr
        return done.stdout

    def directory(self, run_id: str) -> Path:
        return self.root / workspace_name_for(run_id)

    def result_of(self, run_id: str):
        return self.dev_env.client.get_workflow_handle(run_id).result()


@pytest.fixture
async def harness(dev_env, fake_llm, tmp_path, cli):
    h = Harness(dev_env, fake_llm, tmp_path, cli)
    async with build_worker(dev_env.client, h.settings):
        yield h


async def three_step_origin(harness: Harness):
    """A run that writes files in step 1, changes, deletes and adds in step 2, and ends in step 3."""
    harness.fake.turns = [python(WRITE_STEP_1), python(WRITE_STEP_2), terminate("written")]
    handle = await harness.start()
    assert (await handle.result()).steps_taken == 3
    assert files(harness.directory(handle.id)) == AT_STEP_2
    return handle


async def test_a_fork_goes_on_from_the_state_and_files_of_step_n(harness):
    origin = await three_step_origin(harness)
    before = len(harness.fake.requests)
    harness.fake.turns = [python(WRITE_STEP_1), python(LIST_FILES), terminate("forked and done")]

    out = await harness.cli("fork", origin.id, "--from-step", "1", "--message", "Now list the files.", "--id", "the-fork")
    assert f"forked {origin.id} at step 1" in out and out.rstrip().endswith("forked and done")

    result = await harness.result_of("the-fork")
    assert result["steps_taken"] == 3
    assert listed(result["steps"][-2]["tool_calls"][0]["observation"]) == AT_STEP_1
    assert files(harness.directory("the-fork")) == AT_STEP_1
    assert files(harness.directory(origin.id)) == AT_STEP_2, "the origin's directory changed"
    (first,) = [r for r in harness.fake.requests[before:] if r.turn == 1][:1]
    contents = [m.get("content") or "" for m in first.messages]
    assert "Now list the files." in contents and "write the files" in contents
    assert [m for m in first.messages if m["role"] == "tool"][0]["tool_call_id"], "step 1's call and its reply"
    assert len([m for m in first.messages if m["role"] == "assistant"]) == 1, "only step 1 was kept"

    shown = await harness.cli("show", "the-fork")
    assert shown.splitlines()[0].startswith(f"forked from {origin.id} at step 1")
    assert (await origin.result()).final_answer == "written", "the origin is untouched"
    forked = harness.dev_env.client.get_workflow_handle("the-fork")
    assert f"forked from {origin.id} at step 1" in (await (await forked.describe()).static_summary() or "")
    details = (await forked.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)).current_details
    assert f"**forked from {origin.id} at step 1**" in details


async def test_a_fork_with_a_new_task_and_llm(harness):
    origin = await three_step_origin(harness)
    before = len(harness.fake.requests)
    harness.fake.turns = [python(WRITE_STEP_1), terminate("other answer")]
    out = await harness.cli("fork", origin.id, "--from-step", "1", "--task", "Another task.", "--llm", "small")
    assert out.rstrip().endswith("other answer")
    (think,) = harness.fake.requests[before:]
    assert think.model == "gpt-4o-mini"
    users = [m["content"] for m in think.messages if m["role"] == "user"]
    assert users[0] == "Another task." and "write the files" not in users


async def test_a_fork_of_step_0_starts_over_with_an_empty_directory(harness):
    origin = await three_step_origin(harness)
    harness.fake.turns = [python(LIST_FILES), terminate("fresh")]
    await harness.cli("fork", origin.id, "--from-step", "0", "--id", "from-zero")
    result = await harness.result_of("from-zero")
    assert listed(result["steps"][0]["tool_calls"][0]["observation"]) == {}


async def test_a_fork_of_a_fork(harness):
    origin = await three_step_origin(harness)
    harness.fake.turns = [python(WRITE_STEP_1), python(WRITE_STEP_2), terminate("second")]
    await harness.cli("fork", origin.id, "--from-step", "1", "--id", "fork-one")
    assert files(harness.directory("fork-one")) == AT_STEP_2
    harness.fake.turns = [python(WRITE_STEP_1), python(LIST_FILES), terminate("third")]
    await harness.cli("fork", "fork-one", "--from-step", "1", "--id", "fork-two")
    assert files(harness.directory("fork-two")) == AT_STEP_1


async def test_rewind_restores_the_files_of_the_step(harness):
    origin = await three_step_origin(harness)
    harness.fake.turns = [python(WRITE_STEP_1), python(LIST_FILES), terminate("rewound")]
    out = await harness.cli("rewind", origin.id, "--to-step", "1")
    assert f"restoring the files of {origin.id} to the end of step 1" in out
    result = await harness.result_of(origin.id)
    assert result["final_answer"] == "rewound"
    assert listed(result["steps"][1]["tool_calls"][0]["observation"]) == AT_STEP_1


async def test_a_fork_of_a_flow_step(harness):
    harness.fake.responder = FlowScript(
        plan_reply("Write the files", "Change them"),
        {1: [python(WRITE_STEP_1), terminate("step 1 done")], 2: [python(WRITE_STEP_2), terminate("step 2 done")]},
    )
    flow = await harness.dev_env.client.start_workflow(
        PlanningFlowWorkflow.run,
        PlanningFlowInput(task="Write and change files", agents=["manus"]),
        id=f"flow-{uuid.uuid4().hex[:8]}",
        task_queue=harness.settings.task_queue,
    )
    plan = (await flow.result()).plan
    first_step = plan.steps[0].run_id
    flow_dir = harness.directory(flow.id)
    assert files(flow_dir) == AT_STEP_2, "the second step changed what the first wrote"

    harness.fake.responder = None
    harness.fake.turns = [python(WRITE_STEP_1), python(LIST_FILES), terminate("forked step")]
    await harness.cli("fork", first_step, "--from-step", "1", "--id", "flow-step-fork")
    result = await harness.result_of("flow-step-fork")
    assert listed(result["steps"][-2]["tool_calls"][0]["observation"]) == AT_STEP_1
    assert files(harness.directory("flow-step-fork")) == AT_STEP_1
    assert files(flow_dir) == AT_STEP_2, "the flow's directory changed"

    # The second step at its step 0 had what the first step left.
    harness.fake.turns = [python(LIST_FILES), terminate("from the start of step 2")]
    await harness.cli("fork", plan.steps[1].run_id, "--from-step", "0", "--id", "flow-step-two-fork")
    result = await harness.result_of("flow-step-two-fork")
    assert listed(result["steps"][0]["tool_calls"][0]["observation"]) == AT_STEP_1
    assert "is a planning flow; fork one of its steps" in await harness.cli(
        "fork", flow.id, "--from-step", "1", expect=2
    )


async def test_bad_fork_inputs_are_one_line_each(harness):
    origin = await three_step_origin(harness)
    assert "no run with id 'nope'" in await harness.cli("fork", "nope", "--from-step", "1", expect=2)
    assert "--from-step must be from 0 to 3" in await harness.cli("fork", origin.id, "--from-step", "4", expect=2)
    assert "--from-step must be 0 or more" in await harness.cli("fork", origin.id, "--from-step", "-1", expect=2)
    assert "not allowed with argument" in await harness.cli(
        "fork", origin.id, "--from-step", "1", "--task", "a", "--message", "b", expect=2
    )
    assert "--message is empty" in await harness.cli("fork", origin.id, "--from-step", "1", "--message", " ", expect=2)
    assert "no [llm.nope]" in await harness.cli("fork", origin.id, "--from-step", "1", "--llm", "nope", expect=2)
    assert "required: --from-step" in await harness.cli("fork", origin.id, expect=2)


async def test_the_fork_input_names_its_origin(harness):
    origin = await three_step_origin(harness)
    run = await fork.fork_input(harness.dev_env.client, harness.settings, origin.id, 2, "f-id")
    assert run.forked_from is not None
    assert (run.forked_from.run_id, run.forked_from.step) == (origin.id, 2)
    assert run.forked_from.execution == (await origin.describe()).run_id
    assert run.forked_from.workspace == workspace_name_for(origin.id)
    assert run.carried is not None and run.carried.step == 2 and run.carried.directory == ""
    assert [r.step for r in run.carried.records] == [1, 2]


async def test_a_fork_keeps_the_shell_s_directory_in_its_own_directory(harness):
    harness.fake.turns = [
        Reply(tool_calls=[call("bash", {"command": "mkdir -p sub && cd sub && touch here"})]),
        Reply(tool_calls=[call("bash", {"command": "cd / && pwd"})]),
        terminate("done"),
    ]
    origin = await harness.start(agent="swe")
    await origin.result()
    harness.fake.turns = [harness.fake.turns[0], Reply(tool_calls=[call("bash", {"command": "pwd; ls"})]), terminate("ok")]
    await harness.cli("fork", origin.id, "--from-step", "1", "--id", "shell-fork")
    result = await harness.result_of("shell-fork")
    assert result["steps"][-2]["tool_calls"][0]["observation"].split() == [str(harness.directory("shell-fork") / "sub"), "here"]


async def test_a_running_origin_can_be_forked(harness):
    harness.fake.turns = [python(WRITE_STEP_1), Reply(tool_calls=[call("ask_human", {"inquire": "Go on?"})])]
    origin = await harness.start()
    await wait_until(lambda: origin.query(AgentWorkflow.pending_question), 30, "the question", 0.1)
    harness.fake.turns = [python(WRITE_STEP_1), python(LIST_FILES), terminate("forked while it waits")]
    out = await harness.cli("fork", origin.id, "--from-step", "1", "--id", "fork-of-running")
    assert out.rstrip().endswith("forked while it waits")
    assert "--from-step must be from 0 to 1" in await harness.cli("fork", origin.id, "--from-step", "2", expect=2)
    await origin.cancel()
