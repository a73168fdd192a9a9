"""Runs with encrypted payloads on a real dev server: the server's database holds
no task, observation, question or answer in the clear (while the same run
without a key file leaves them all there), every payload of the history is
ciphertext, the run replays with the key and not without it, and continue-as-
new, show, list, result and rewind read the run through the codec."""

from __future__ import annotations

import io
import json
import tomllib
import uuid
from pathlib import Path

import pytest
from google.protobuf.message import Message
from temporalio.api.common.v1 import Payload
from temporalio.client import Client, WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from agent_model.payload_crypto import ENCODING, KEY_ID_FIELD
from agent_model.profiles import AgentProfile
from agent_model.run import AgentRunInput, AgentRunResult
from config.encryption_settings import EncryptionSettings
from config.key_file import add_new_key
from runtime import run_control
from runtime.connection import data_converter
from runtime.worker_factory import build_worker
from testkit.cli import cli_environment
from testkit.e2e import child_env, server_address, wait_until
from testkit.fake_openai import ErrorReply, Reply, call, python, terminate
from testkit.servers import start_dev_server
from testkit.settings import make_settings
from workflows.agent import AgentWorkflow
from workflows.planning import PlanningFlowWorkflow

PATCHES = tomllib.loads((Path(__file__).parent / "histories" / "PATCHES.toml").read_text())
"""The workflows' patch ids (tests/histories/PATCHES.toml)."""

PROFILE = AgentProfile(
    name="sealed",
    system_prompt="You are a test agent in {directory}.",
    next_step_prompt="What next?",
    tools=["python_execute", "ask_human", "terminate"],
    max_steps=20,
    max_observe=2000,
)


def key_settings(tmp_path: Path) -> EncryptionSettings:
    path = tmp_path / "keys" / "payload-keys.json"
    add_new_key(path)
    return EncryptionSettings(key_file=str(path))


def client_for(env, encryption: EncryptionSettings) -> Client:
    """A client of `env`'s server with the product's data converter for `encryption`."""
    return Client(env.client.service_client, namespace=env.client.namespace, data_converter=data_converter(encryption))


class Markers:
    """Words that reach the server only through payloads: the task, a tool's
    output (the code that prints it never spells it), the model's question,
    the user's answer and the final answer."""

    def __init__(self) -> None:
        tag = uuid.uuid4().hex[:12]
        self.task = f"task-marker-{tag}"
        self.observation = f"observation-marker-{tag}"
        self.question = f"question-marker-{tag}"
        self.answer = f"answer-marker-{tag}"
        self.final = f"final-marker-{tag}"

    def all(self) -> dict[str, str]:
        return vars(self)

    def turns(self) -> list[Reply]:
        printed = self.observation.split("-")
        return [
            python(f"print({'-'.join(printed[:1])!r} + '-' + {'-'.join(printed[1:])!r})"),
            Reply(tool_calls=[call("ask_human", {"inquire": self.question})]),
            terminate(self.final),
        ]


def database_bytes(db: Path) -> bytes:
    """The server's SQLite database with its journal or WAL, whatever it holds now."""
    return b"".join(path.read_bytes() for path in sorted(db.parent.glob(f"{db.name}*")))


def payloads_of(message: Message, skip: frozenset[str] = frozenset({"search_attributes"})) -> list[Payload]:
    """Every Payload inside a history event (search attributes are not
    payloads of the run's data: Temporal indexes them in the clear)."""
    found: list[Payload] = []
    for field, value in message.ListFields():
        if field.name in skip or field.message_type is None:
            continue
        values = value.values() if field.message_type.GetOptions().map_entry else (
            value if field.is_repeated else [value]
        )
        for item in values:
            if isinstance(item, Payload):
                found.append(item)
            elif isinstance(item, Message):
                found += payloads_of(item, skip)
    return found


@pytest.mark.parametrize("encrypted", [True, False], ids=["with a key file", "without one"])
async def test_the_server_s_database_holds_no_plaintext_of_an_encrypted_run(tmp_path, fake_llm, cli, encrypted):
    db = tmp_path / "server" / "temporal.db"
    db.parent.mkdir()
    server = await start_dev_server("--db-filename", str(db))
    try:
        encryption = key_settings(tmp_path) if encrypted else EncryptionSettings()
        settings = make_settings(fake_llm.base_url, tmp_path / "workspace")
        markers = Markers()
        fake_llm.turns = markers.turns()
        extra = {"DURABLE_MANUS_ENCRYPTION_KEY_FILE": encryption.key_file} if encrypted else {}
        env = child_env(
            tmp_path, address=server_address(server), task_queue=settings.task_queue, base_url=fake_llm.base_url,
            extra=extra,
        )

        async def starter(*args: str) -> str:
            done = await cli.in_thread(*args, env_extra=cli_environment(env))
            assert done.returncode == 0, done
            return done.stdout

        client = client_for(server, encryption)
        async with build_worker(client, settings):
            started = await starter("run", "--detach", "--worker", "never", "--id", f"sealed-{uuid.uuid4().hex[:6]}", markers.task)
            run_id = started.split()[1]
            handle = client.get_workflow_handle(run_id, result_type=AgentRunResult)
            await wait_until(lambda: handle.query(AgentWorkflow.pending_question), 30, "the question", 0.1)
            await starter("answer", run_id, markers.answer)
            result = await handle.result()
            # The starter's own commands read it all back, through the codec when it is on.
            shown = await starter("show", run_id, "--worker", "never")
            finished = await starter("result", run_id)
            listed = await starter("list")
        stored = database_bytes(db)
    finally:
        await server.shutdown()

    assert result.final_answer == markers.final
    assert markers.observation in shown and markers.question in shown and markers.answer in shown
    assert finished.rstrip().endswith(markers.final) and markers.task in listed
    leaked = [name for name, word in markers.all().items() if word.encode() in stored]
    if encrypted:
        assert leaked == [], f"in the server's database in the clear: {leaked}"
    else:  # the same words are plain to see without a key file: the check above can fail
        assert sorted(leaked) == sorted(markers.all()), leaked


@pytest.fixture(scope="module")
async def sealed_run(dev_env, tmp_path_factory):
    """One encrypted run on the session's dev server: (encryption, client, handle, history)."""
    from testkit.fake_openai import FakeOpenAI

    tmp_path = tmp_path_factory.mktemp("sealed")
    encryption = key_settings(tmp_path)
    client = client_for(dev_env, encryption)
    fake = FakeOpenAI().start()
    try:
        markers = Markers()
        fake.turns = markers.turns()
        settings = make_settings(fake.base_url, tmp_path / "workspace")
        async with build_worker(client, settings):
            handle = await client.start_workflow(
                AgentWorkflow.run, AgentRunInput(task=markers.task, profile=PROFILE),
                id=f"sealed-{uuid.uuid4().hex[:8]}", task_queue=settings.task_queue, static_summary=markers.task,
            )
            await wait_until(lambda: handle.query(AgentWorkflow.pending_question), 30, "the question", 0.1)
            await run_control.answer(client, handle.id, markers.answer, io.StringIO())
            await handle.result()
        history = await handle.fetch_history()
    finally:
        fake.stop()
    yield encryption, client, handle, history, markers


async def test_every_payload_of_an_encrypted_run_s_history_is_ciphertext(sealed_run):
    encryption, _, _, history, markers = sealed_run
    payloads = [(event, p) for event in history.events for p in payloads_of(event)]
    sealed = [p for _, p in payloads if p.metadata["encoding"] == ENCODING]
    assert len(sealed) > 10  # input, summaries, thinks, observations, the answer, the result
    assert {p.metadata[KEY_ID_FIELD] for p in sealed} == {b"k1"}
    # The one exception is the SDK core's own (docs/security.md): a patch marker names its
    # patch, a local activity's marker (the directory made) its activity, not its result.
    plain = [(event, p) for event, p in payloads if p.metadata["encoding"] != ENCODING]
    assert plain and all(event.HasField("marker_recorded_event_attributes") for event, _ in plain)
    records = [json.loads(p.data) for _, p in plain]
    assert {r["id"] for r in records if "id" in r} <= set(PATCHES), records
    assert [r["activity_type"] for r in records if "id" not in r] == ["prepare_workspace"], records
    raw = b"".join(event.SerializeToString() for event in history.events)
    assert not [word for word in markers.all().values() if word.encode() in raw]


async def test_an_encrypted_history_replays_with_its_key_and_not_without(sealed_run):
    encryption, client, _, history, _ = sealed_run
    replayed = await Replayer(workflows=[AgentWorkflow, PlanningFlowWorkflow], data_converter=client.data_converter).replay_workflow(
        WorkflowHistory.from_json(history.workflow_id, history.to_json())
    )
    assert replayed.replay_failure is None
    without = await Replayer(workflows=[AgentWorkflow], data_converter=pydantic_data_converter).replay_workflow(
        history, raise_on_replay_failure=False
    )
    assert without.replay_failure is not None  # the ciphertext really is what the workflow reads


CONTINUING = AgentProfile(
    name="sealed-long", system_prompt="You are a test agent.", next_step_prompt="What next?",
    tools=["python_execute", "terminate"], max_steps=20, max_observe=2000,
)


async def test_an_encrypted_run_continues_as_new_and_is_read_and_rewound_as_one(dev_env, fake_llm, tmp_path):
    encryption = key_settings(tmp_path)
    client = client_for(dev_env, encryption)
    settings = make_settings(fake_llm.base_url, tmp_path / "workspace")
    fake_llm.turns = [python(f"print('out', {n})") for n in range(1, 5)] + [terminate("four printed")]
    async with build_worker(client, settings):
        handle = await client.start_workflow(
            AgentWorkflow.run, AgentRunInput(task="print four things", profile=CONTINUING, steps_per_run=2),
            id=f"sealed-can-{uuid.uuid4().hex[:8]}", task_queue=settings.task_queue,
        )
        result = await handle.result()
        records = await run_control.records_of(client, handle.id)
        out = io.StringIO()
        await run_control.rewind(client, handle.id, 3, out)  # step 4 began in the second execution
        again = await client.get_workflow_handle(handle.id, result_type=AgentRunResult).result()
    assert result.final_answer == "four printed" and result.steps_taken == 5
    assert [r.step for r in records] == [1, 2, 3, 4, 5]
    assert [r.tool_calls[0].observation.strip() for r in records[:4]] == [f"out {n}" for n in range(1, 5)]
    assert again.final_answer == "four printed" and again.steps_taken == 5
    executions = 0
    async for execution in client.list_workflows(f"WorkflowId = '{handle.id}'"):
        history = await client.get_workflow_handle(handle.id, run_id=execution.run_id).fetch_history()
        started = history.events[0].workflow_execution_started_event_attributes
        assert started.input.payloads[0].metadata["encoding"] == ENCODING
        assert (await run_control.started_run_input(client, history)).task == "print four things"
        executions += 1
    assert executions >= 4  # three of the first run, and the rewound one's


async def test_a_command_without_the_run_s_key_says_so_in_one_line(sealed_run, dev_env, cli, tmp_path):
    _, _, handle, _, markers = sealed_run
    env = child_env(tmp_path, address=server_address(dev_env), task_queue="unused", base_url="http://127.0.0.1:9/v1")
    other_keys = key_settings(tmp_path)  # a key file of its own: its k1 is not the run's k1
    cases = {
        "no key file": ({}, "has no key file: set [encryption] key_file"),
        "another key file": (
            {"DURABLE_MANUS_ENCRYPTION_KEY_FILE": other_keys.key_file}, "key 'k1' fails its integrity check"
        ),
    }
    for name, (extra, said) in cases.items():
        done = await cli.in_thread("result", handle.id, env_extra=cli_environment({**env, **extra}))
        assert done.returncode == 2 and said in done.stderr, (name, done)
        assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, (name, done.stderr)
        assert markers.final not in done.stdout + done.stderr
        listed = await cli.in_thread("list", "--limit", "100", env_extra=cli_environment({**env, **extra}))
        (row,) = [line for line in listed.stdout.splitlines() if line.startswith(handle.id)]
        assert row.endswith("(encrypted)") and markers.task not in row, (name, row)


@pytest.mark.e2e
async def test_the_mcp_server_and_its_worker_encrypt_with_the_key_file(dev_env, fake_llm, tmp_path):
    from testkit.e2e import unique_queue
    from tests.test_mcp_server import stdio_session

    encryption = key_settings(tmp_path)
    markers = Markers()
    fake_llm.turns = markers.turns()[:1] + [terminate(markers.final)]
    env = child_env(
        tmp_path, address=server_address(dev_env), task_queue=unique_queue("mcp-sealed"), base_url=fake_llm.base_url,
        extra={"DURABLE_MANUS_ENCRYPTION_KEY_FILE": encryption.key_file},
    )
    async with stdio_session(env, tmp_path / "mcp-server.err", "--with-worker") as session:
        run_id = (await session.call("start_run", task=markers.task))["run_id"]
        result = await session.call("run_result", run_id=run_id, wait_seconds=60)
        steps = await session.call("run_steps", run_id=run_id)
    assert result["final_answer"] == markers.final and markers.observation in json.dumps(steps)
    history = await dev_env.client.get_workflow_handle(run_id).fetch_history()
    sealed = [p for event in history.events for p in payloads_of(event) if p.metadata["encoding"] == ENCODING]
    assert len(sealed) > 5
    raw = b"".join(event.SerializeToString() for event in history.events)
    assert not [word for word in markers.all().values() if word.encode() in raw]


async def test_a_failure_s_message_reaches_the_workflow_and_the_reader_but_not_the_server(dev_env, fake_llm, tmp_path):
    """encode_common_attributes: a failure's message and stack trace travel in
    an encrypted payload; the workflow still words its note from it, and the
    reader gets it back."""
    from temporalio.client import WorkflowFailureError

    marker = f"rejected-marker-{uuid.uuid4().hex[:8]}"
    client = client_for(dev_env, key_settings(tmp_path))
    settings = make_settings(fake_llm.base_url, tmp_path / "workspace")
    fake_llm.turns = [ErrorReply(400, message=marker)]  # the model refuses the request: the run cannot go on
    async with build_worker(client, settings):
        handle = await client.start_workflow(
            AgentWorkflow.run, AgentRunInput(task="fail", profile=PROFILE), id=f"sealed-fail-{uuid.uuid4().hex[:6]}",
            task_queue=settings.task_queue,
        )
        with pytest.raises(WorkflowFailureError) as failed:
            await handle.result()
    assert marker in str(failed.value.cause) and "LLMRequestRejected" in str(failed.value.cause)
    history = await handle.fetch_history()
    failures = [e for e in history.events if e.HasField("workflow_execution_failed_event_attributes")]
    assert [e.workflow_execution_failed_event_attributes.failure.message for e in failures] == ["Encoded failure"]
    raw = b"".join(event.SerializeToString() for event in history.events)
    assert marker.encode() not in raw
