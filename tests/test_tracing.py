"""OpenTelemetry tracing of runs on a real dev server (docs/tracing.md): the
spans a run exports, their tree and GenAI attributes, exactly once whatever
replays the run, through the real OTLP/HTTP exporter; and nothing without
[telemetry]."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from activities.redaction import Redactor
from agent_model.run import HumanAnswer
from config.telemetry_settings import TelemetrySettings
from runtime.worker_factory import WORKFLOWS, build_worker, sandboxed_runner
from testkit.e2e import wait_until
from testkit.fake_openai import ErrorReply, Reply, call, python, terminate
from testkit.run_results import final_result
from testkit.settings import make_settings
from testkit.tracing import OtlpReceiver, ancestors, in_memory_tracing, named, parent_of
from tests.record_history import workflow_id_of
from tests.test_agent_workflow import start
from tests.test_planning_flow import FlowScript, plan_reply, start_flow
from workflows.agent import AgentWorkflow

pytestmark = pytest.mark.timeout(120)

HISTORIES = Path(__file__).resolve().parent / "histories"
RUN = "invoke_agent tester"


def scripted(fake_llm) -> None:
    """Two steps: python_execute, then terminate; fixed token counts per think."""
    fake_llm.turns = [
        Reply(tool_calls=python("print(6*7)").tool_calls, usage=(120, 30)),
        Reply(tool_calls=terminate("42").tool_calls, usage=(150, 12)),
    ]


def one_of(spans, name):
    found = named(spans, name)
    assert len(found) == 1, f"{len(found)} spans {name!r}: {sorted(s.name for s in spans)}"
    return found[0]


def assert_each_once(spans) -> None:
    """No span id twice, and no span of the run's own (run, step, tool call) twice."""
    ids = [span.context.span_id for span in spans]
    assert len(ids) == len(set(ids)), "a span was exported twice"
    ours = [
        (s.name, *(s.attributes.get(k) for k in ("temporalWorkflowID", "temporalRunID", "gen_ai.tool.call.id")))
        for s in spans
        if s.name.startswith(("invoke_agent ", "invoke_workflow ", "step ", "execute_tool "))
    ]
    assert len(ours) == len(set(ours)), sorted(ours)


async def test_a_run_exports_its_tree_with_genai_attributes(dev_env, fake_llm, tmp_path):
    settings = make_settings(fake_llm.base_url, tmp_path / "workspace")
    scripted(fake_llm)
    tracing, exporter = in_memory_tracing()
    async with build_worker(dev_env.client, settings, tracing=tracing):
        handle = await start(dev_env, settings)
        result = await final_result(handle)
    assert result.final_answer == "42"
    spans = list(exporter.get_finished_spans())

    run = one_of(spans, RUN)
    assert run.parent is None and {s.context.trace_id for s in spans} == {run.context.trace_id}
    assert run.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert run.attributes["gen_ai.agent.name"] == "tester"
    assert run.attributes["temporalWorkflowID"] == handle.id
    assert run.attributes["temporalRunID"] == handle.result_run_id
    assert (run.attributes["durable_manus.state"], run.attributes["durable_manus.steps"]) == ("FINISHED", 2)
    assert (run.attributes["gen_ai.usage.input_tokens"], run.attributes["gen_ai.usage.output_tokens"]) == (270, 42)
    assert run.start_time < run.end_time

    steps = [one_of(spans, "step 1"), one_of(spans, "step 2")]
    for number, step in enumerate(steps, 1):
        assert parent_of(step, spans) is run
        assert step.attributes["durable_manus.step"] == number
        assert run.start_time <= step.start_time < step.end_time <= run.end_time
    assert steps[1].attributes["durable_manus.stop_reason"] == "terminated"

    chats = named(spans, "chat gpt-4o")
    assert len(chats) == 2
    for step, chat, tokens, reason in zip(steps, chats, [(120, 30), (150, 12)], ["tool_calls", "tool_calls"]):
        assert step in ancestors(chat, spans)
        activity = parent_of(chat, spans)
        assert activity is not None and activity.name == "RunActivity:think"
        assert chat.attributes["temporalActivityID"] == activity.attributes["temporalActivityID"]
        assert chat.attributes["temporalWorkflowID"] == handle.id
        assert chat.attributes["gen_ai.operation.name"] == "chat"
        assert chat.attributes["gen_ai.provider.name"] == chat.attributes["gen_ai.system"] == "openai"
        assert chat.attributes["gen_ai.request.model"] == chat.attributes["gen_ai.response.model"] == "gpt-4o"
        assert (chat.attributes["gen_ai.usage.input_tokens"], chat.attributes["gen_ai.usage.output_tokens"]) == tokens
        assert chat.attributes["gen_ai.response.finish_reasons"] == (reason,)

    python_call = one_of(spans, "execute_tool python_execute")
    assert parent_of(python_call, spans) is steps[0]
    assert python_call.attributes["gen_ai.operation.name"] == "execute_tool"
    assert python_call.attributes["gen_ai.tool.name"] == "python_execute"
    assert python_call.attributes["gen_ai.tool.call.id"] == result.steps[0].tool_calls[0].id
    assert python_call.attributes["durable_manus.tool.outcome"] == "ok"
    assert "error.type" not in python_call.attributes
    (tool_activity,) = [s for s in spans if s.name == "RunActivity:python_execute"]
    assert python_call in ancestors(tool_activity, spans)
    ending = one_of(spans, "execute_tool terminate")  # a tool that runs in the workflow
    assert parent_of(ending, spans) is steps[1]

    # No content by default: neither the code the model wrote nor the key.
    shown = json.dumps([dict(s.attributes) for s in spans], default=str)
    assert "print(6*7)" not in shown and "test-key" not in shown
    assert "gen_ai.output.messages" not in shown and "gen_ai.tool.call.arguments" not in shown
    assert_each_once(spans)


async def test_a_failed_tool_call_says_so(dev_env, fake_llm, tmp_path):
    settings = make_settings(fake_llm.base_url, tmp_path / "workspace")
    fake_llm.turns = [Reply(tool_calls=[call("python_execute", {"code": "raise SystemExit(3)"})]), terminate("gave up")]
    tracing, exporter = in_memory_tracing()
    async with build_worker(dev_env.client, settings, tracing=tracing):
        result = await final_result(await start(dev_env, settings))
    assert result.steps[0].tool_calls[0].error
    failed = one_of(exporter.get_finished_spans(), "execute_tool python_execute")
    assert failed.attributes["durable_manus.tool.outcome"] == "error"
    assert failed.attributes["error.type"] == "tool_error"
    assert failed.status.status_code.name == "UNSET"  # the call failed, not the span: the model was told


async def test_each_think_attempt_is_a_chat_span_and_a_failed_one_says_why(dev_env, fake_llm, tmp_path):
    settings = make_settings(fake_llm.base_url, tmp_path / "workspace")
    fake_llm.turns = [[ErrorReply(503, retry_after=0.1), terminate("done")]]
    tracing, exporter = in_memory_tracing()
    async with build_worker(dev_env.client, settings, tracing=tracing):
        result = await final_result(await start(dev_env, settings))
    assert result.final_answer == "done"
    spans = list(exporter.get_finished_spans())
    failed, answered = sorted(named(spans, "chat gpt-4o"), key=lambda s: s.start_time)
    assert failed.attributes["error.type"] == "LLMUnavailable" and failed.status.status_code.name == "ERROR"
    assert "gen_ai.usage.input_tokens" not in failed.attributes
    assert answered.status.status_code.name == "UNSET" and answered.attributes["gen_ai.usage.output_tokens"] > 0
    step = one_of(spans, "step 1")
    assert step in ancestors(failed, spans) and step in ancestors(answered, spans)
    shown = json.dumps([dict(s.attributes) for s in spans], default=str)
    assert "test-key" not in shown and "Service Unavailable" not in shown


async def test_a_run_moved_to_a_second_worker_exports_each_span_once(dev_env, fake_llm, tmp_path):
    """Worker A runs step 1 and is stopped while step 2 waits for an answer;
    worker B replays the run and finishes it. Together they export each
    span once, in one tree: B's spans hang under the run and step A opened."""
    settings = make_settings(fake_llm.base_url, tmp_path / "workspace")
    fake_llm.turns = [
        python("print(6*7)"),
        Reply(tool_calls=[call("ask_human", {"inquire": "Which colour?"})]),
        terminate("blue"),
    ]
    first, first_spans = in_memory_tracing()
    async with build_worker(dev_env.client, settings, tracing=first):
        handle = await start(dev_env, settings)
        await wait_until(lambda: handle.query(AgentWorkflow.pending_question), 30, "the question")
        question = await handle.query(AgentWorkflow.pending_question)
    on_first = list(first_spans.get_finished_spans())
    assert one_of(on_first, "step 1") and not named(on_first, RUN) and not named(on_first, "step 2")

    second, second_spans = in_memory_tracing()
    async with build_worker(dev_env.client, settings, tracing=second):
        await handle.execute_update(AgentWorkflow.answer, HumanAnswer(question_id=question.id, text="blue"))
        result = await final_result(handle)
    assert result.final_answer == "blue"
    on_second = list(second_spans.get_finished_spans())
    assert not named(on_second, "step 1"), "the second worker exported what the first had"

    spans = on_first + on_second
    assert_each_once(spans)
    run = one_of(on_second, RUN)
    assert {s.context.trace_id for s in spans} == {run.context.trace_id}
    steps = [one_of(spans, f"step {n}") for n in (1, 2, 3)]
    assert all(parent_of(step, spans) is run for step in steps)
    asked = one_of(on_second, "execute_tool ask_human")
    assert parent_of(asked, spans) is steps[1]
    # Opened on the first worker, closed on the second: its time runs across both.
    assert run.start_time < steps[0].start_time
    assert steps[1].start_time <= max(s.end_time for s in on_first) < steps[1].end_time
    chats = named(spans, "chat gpt-4o")
    assert len(chats) == 3 and all(any(a in steps for a in ancestors(c, spans)) for c in chats)


async def test_a_run_replayed_at_every_task_exports_each_span_once(dev_env, fake_llm, tmp_path):
    """With no workflow cache the worker replays the whole history at every
    workflow task: the spans still come once each, in the same tree."""
    settings = make_settings(fake_llm.base_url, tmp_path / "workspace")
    scripted(fake_llm)
    tracing, exporter = in_memory_tracing()
    async with build_worker(dev_env.client, settings, tracing=tracing, max_cached_workflows=0):
        await final_result(await start(dev_env, settings))
    spans = list(exporter.get_finished_spans())
    assert_each_once(spans)
    run = one_of(spans, RUN)
    for name in ("step 1", "step 2"):
        assert parent_of(one_of(spans, name), spans) is run
    for name in ("execute_tool python_execute", "execute_tool terminate"):
        assert one_of(spans, name)
    assert len(named(spans, "chat gpt-4o")) == 2
    assert len(named(spans, "StartActivity:think")) == 2


async def test_replaying_histories_exports_nothing(dev_env, fake_llm, tmp_path):
    """A Replayer with the worker's tracing: this session's run and every
    committed history replay (tracing issues no command) and export no span."""
    settings = make_settings(fake_llm.base_url, tmp_path / "workspace")
    scripted(fake_llm)
    tracing, exporter = in_memory_tracing()
    async with build_worker(dev_env.client, settings, tracing=tracing):
        handle = await start(dev_env, settings)
        await final_result(handle)
    exported = len(exporter.get_finished_spans())
    assert exported > 0
    replayer = Replayer(
        workflows=WORKFLOWS,
        data_converter=pydantic_data_converter,
        workflow_runner=sandboxed_runner(),
        interceptors=tracing.interceptors(None, settings.llm, Redactor([])),
    )
    await replayer.replay_workflow(await handle.fetch_history())
    committed = sorted(HISTORIES.glob("*.json"))
    assert len(committed) > 10
    for path in committed:
        await replayer.replay_workflow(WorkflowHistory.from_json(workflow_id_of(path), path.read_text(encoding="utf-8")))
    assert len(exporter.get_finished_spans()) == exported


async def test_captured_content_is_redacted_and_bounded(dev_env, fake_llm, tmp_path):
    secret = "sk-test-secret-0123456789"
    settings = make_settings(fake_llm.base_url, tmp_path / "workspace", api_key=secret)
    fake_llm.api_key = secret
    code = f"print('{secret}')\n# {'y' * 9000}"
    fake_llm.turns = [python(code, content="checking the key"), terminate("done")]
    tracing, exporter = in_memory_tracing(capture_content=True)
    async with build_worker(dev_env.client, settings, tracing=tracing):
        await final_result(await start(dev_env, settings))
    spans = exporter.get_finished_spans()
    shown = json.dumps([dict(s.attributes) for s in spans], default=str)
    assert secret not in shown
    tool = one_of(spans, "execute_tool python_execute")
    arguments = tool.attributes["gen_ai.tool.call.arguments"]
    assert "[REDACTED]" in arguments and len(arguments) < 4100 and "more characters cut" in arguments
    assert tool.attributes["gen_ai.tool.call.result"].strip() == "[REDACTED]"
    first_chat = named(spans, "chat gpt-4o")[0]
    (message,) = json.loads(first_chat.attributes["gen_ai.output.messages"])
    assert message["parts"][0] == {"type": "text", "content": "checking the key"}
    assert message["parts"][1]["name"] == "python_execute" and "[REDACTED]" in message["parts"][1]["arguments"]


async def test_spans_reach_an_otlp_http_endpoint(dev_env, fake_llm, tmp_path, caplog):
    """[telemetry] otlp_endpoint alone: the worker's OTLP/HTTP exporter posts
    protobuf to <endpoint>/v1/traces; the worker's shutdown flushes the batch."""
    caplog.set_level(logging.INFO, logger="runtime.worker_factory")
    receiver = OtlpReceiver()
    try:
        settings = make_settings(fake_llm.base_url, tmp_path / "workspace").model_copy(
            update={"telemetry": TelemetrySettings(otlp_endpoint=receiver.endpoint, service_name="manus-test")}
        )
        scripted(fake_llm)
        async with build_worker(dev_env.client, settings):
            await final_result(await start(dev_env, settings))
    finally:
        receiver.stop()
    assert receiver.requests, "the exporter posted nothing"
    assert {(path, kind) for path, kind, _ in receiver.requests} == {("/v1/traces", "application/x-protobuf")}
    names = receiver.span_names()
    assert names.count(RUN) == 1 and names.count("step 2") == 1 and names.count("chat gpt-4o") == 2
    assert receiver.service_names() == {"manus-test"}
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("tracing:")]
    assert said == [
        f"tracing: spans to {receiver.endpoint}/v1/traces (OTLP/HTTP) as service 'manus-test', without prompts or replies"
    ]


@pytest.mark.parametrize("disabled", [False, True], ids=["no-endpoint", "OTEL_SDK_DISABLED"])
async def test_without_telemetry_the_worker_traces_nothing(dev_env, fake_llm, tmp_path, disabled):
    """No endpoint, or one with tracing disabled: no tracing interceptor, and
    a receiver at that endpoint hears nothing of a whole run."""
    receiver = OtlpReceiver()
    try:
        settings = make_settings(fake_llm.base_url, tmp_path / "workspace")
        if disabled:
            telemetry = TelemetrySettings(otlp_endpoint=receiver.endpoint, disabled=True)
            settings = settings.model_copy(update={"telemetry": telemetry})
        assert not settings.telemetry.enabled
        scripted(fake_llm)
        async with build_worker(dev_env.client, settings) as worker:
            assert worker.tracing is None
            kinds = {type(i).__name__ for w in worker.workers for i in w.config()["interceptors"]}
            assert not kinds & {"TracingInterceptor", "WorkflowSpansInterceptor", "ThinkSpansInterceptor"}, kinds
            result = await final_result(await start(dev_env, settings))
    finally:
        receiver.stop()
    assert result.final_answer == "42"
    assert receiver.requests == []


def test_without_telemetry_no_opentelemetry_sdk_is_loaded(tmp_path):
    """A worker process without [telemetry] (OTEL_SDK_DISABLED set or not)
    loads neither the SDK, the exporter nor the contrib interceptor."""
    probe = (
        "import json, sys; import worker; from config.settings import load_settings; "
        "from runtime.worker_factory import run_tracing; "
        "cases = [{}, {'OTEL_EXPORTER_OTLP_ENDPOINT': 'http://127.0.0.1:4318', 'OTEL_SDK_DISABLED': 'true'}]; "
        "off = [run_tracing(load_settings(env={'WORKSPACE_ROOT': sys.argv[1], **env})) is None for env in cases]; "
        "loaded = sorted(m for m in sys.modules if m.startswith(('opentelemetry.sdk', 'opentelemetry.exporter', "
        "'temporalio.contrib.opentelemetry', 'runtime.tracing', 'activities.tracing', 'runtime.workflow_spans'))); "
        "print(json.dumps([off, loaded]))"
    )
    repo = Path(__file__).resolve().parent.parent
    done = subprocess.run(
        [sys.executable, "-c", probe, str(tmp_path)], cwd=repo, capture_output=True, text=True, timeout=120, check=True
    )
    off, loaded = json.loads(done.stdout.strip().splitlines()[-1])
    assert off == [True, True]
    assert loaded == []


async def test_a_run_that_continues_as_new_stays_one_trace(dev_env, fake_llm, tmp_path):
    """Each execution is an invoke_agent span under the one before it."""
    settings = make_settings(fake_llm.base_url, tmp_path / "workspace")
    fake_llm.turns = [python("print(1)"), python("print(2)"), terminate("done")]
    tracing, exporter = in_memory_tracing()
    async with build_worker(dev_env.client, settings, tracing=tracing):
        result = await final_result(await start(dev_env, settings, steps_per_run=1))
    assert result.final_answer == "done"
    spans = list(exporter.get_finished_spans())
    assert_each_once(spans)
    runs = sorted(named(spans, RUN), key=lambda s: s.start_time)
    assert len(runs) == 3 and len({r.attributes["temporalRunID"] for r in runs}) == 3
    assert [r.attributes.get("durable_manus.continued_as_new") for r in runs] == [True, True, None]
    assert runs[0].parent is None and [parent_of(r, spans) for r in runs[1:]] == runs[:2]
    assert {s.context.trace_id for s in spans} == {runs[0].context.trace_id}
    for number, run in zip((1, 2, 3), runs):
        assert parent_of(one_of(spans, f"step {number}"), spans) is run


async def test_a_flow_traces_its_planner_and_its_child_runs(dev_env, fake_llm, tmp_path):
    settings = make_settings(fake_llm.base_url, tmp_path / "workspace")
    fake_llm.responder = FlowScript(
        plan_reply("[manus] Collect the data", "Write the report"), {n: [terminate(f"step {n} done")] for n in (1, 2)}
    )
    tracing, exporter = in_memory_tracing()
    async with build_worker(dev_env.client, settings, tracing=tracing):
        result = await final_result(await start_flow(dev_env, settings, agents=["manus"]))
    assert result.succeeded
    spans = list(exporter.get_finished_spans())
    assert_each_once(spans)
    flow = one_of(spans, "invoke_workflow planning")
    assert flow.parent is None and flow.attributes["durable_manus.flow.outcome"] == "completed"
    children = named(spans, "invoke_agent manus")
    assert len(children) == 2 and all(flow in ancestors(child, spans) for child in children)
    assert {c.attributes["temporalWorkflowID"] for c in children} == {o.run_id for o in result.steps}
    chats = named(spans, "chat gpt-4o")
    assert len(chats) == 4  # plan, two steps, summary
    assert all(flow in ancestors(chat, spans) for chat in chats)
    assert {s.context.trace_id for s in spans} == {flow.context.trace_id}
