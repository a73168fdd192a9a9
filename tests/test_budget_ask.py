"""A run that asks, at its budget's ceiling, whether to raise it (issue 21):
the reply's reading, and runs and a flow that ask through the question desk."""

from __future__ import annotations

import asyncio

import pytest
from temporalio.service import RPCError

from agent_model.budget import Budget, Prices
from agent_model.budget_raise import BudgetReply, ceiling_question, raise_note, raised_by, read_reply
from agent_model.flow import FlowOutcome, PlanningFlowResult
from agent_model.plan import StepStatus
from agent_model.run import AgentRunResult, HumanAnswer
from agent_model.state import AgentState, StopReason
from agent_model.usage import TokenUsage
from runtime import command_line
from runtime.run_start import run_budget
from testkit.settings import load_config
from testkit.run_results import final_result
from tests.record_history import SCENARIOS, replayer
from tests.test_agent_workflow import start, wait_for_question
from tests.test_budget import PRICES, flow_budget_script, python_step, terminate_step
from tests.test_planning_flow import start_flow
from tests.test_replay import as_history, completed_result, history_file, scheduled_activities, started_input
from workflows.agent import AgentWorkflow

SPENT = TokenUsage(prompt_tokens=300, completion_tokens=60)
"""360 tokens: three steps of the tests' fake model."""
TOKENS = Budget(max_tokens=250, ask_at_ceiling=True)
BOTH = Budget(max_tokens=250, max_cost=0.001, prices={"default": PRICES}, ask_at_ceiling=True)


# ---- the question and the reply (pure) --------------------------------------------------


def test_the_question_says_what_was_spent_and_how_to_reply():
    assert ceiling_question(TOKENS, SPENT, None) == (
        "Budget reached: 360 of 250 tokens. Reply with a new ceiling (e.g. 720 tokens) or 'stop'."
    )
    assert ceiling_question(BOTH, SPENT, 0.00135, "'lots' is not a ceiling") == (
        "'lots' is not a ceiling. Budget reached: 360 of 250 tokens, $0.0014 of $0.0010. "
        "Reply with a new ceiling (e.g. 720 tokens or $0.0027) or 'stop'."
    )


@pytest.mark.parametrize(
    "reply, tokens, cost",
    [
        ("1000", 1000, None),
        ("1000 tokens", 1000, None),
        ("raise it to 20,000 tokens please", 20_000, None),
        ("20k", 20_000, None),
        ("2M tokens", 2_000_000, None),
    ],
)
def test_a_reply_with_a_higher_token_ceiling_raises_it(reply, tokens, cost):
    assert read_reply(reply, TOKENS, SPENT, None) == BudgetReply(raised=TOKENS.model_copy(update={"max_tokens": tokens}))


@pytest.mark.parametrize(
    "reply, tokens, cost",
    [
        ("1000 tokens and $0.50", 1000, 0.5),
        ("$1, 2000 tokens", 2000, 1.0),
        ("0.25 usd and 900 tokens", 900, 0.25),
    ],
)
def test_a_reply_can_raise_both_ceilings(reply, tokens, cost):
    raised = read_reply(reply, BOTH, SPENT, 0.00135).raised
    assert raised is not None and (raised.max_tokens, raised.max_cost) == (tokens, cost)
    assert raised.ask_at_ceiling and raised.prices == BOTH.prices  # it asks again at the new ceiling


def test_a_bare_number_raises_the_ceiling_that_was_reached():
    costly = Budget(max_cost=0.001, prices={"default": PRICES}, ask_at_ceiling=True)
    raised = read_reply("0.5", costly, SPENT, 0.00135).raised
    assert raised is not None and (raised.max_tokens, raised.max_cost) == (None, 0.5)


@pytest.mark.parametrize("reply", ["stop", "Stop.", "no", " NO ", "quit", "end", "enough!"])
def test_stop_and_no_end_the_run(reply):
    assert read_reply(reply, TOKENS, SPENT, None).stops


@pytest.mark.parametrize(
    "reply, problem",
    [
        ("lots", "'lots' is not a ceiling"),
        ("maybe 1000 tokens", "'maybe 1000 tokens' is not a ceiling"),
        ("1000.5 tokens", "'1000.5 tokens' is not a ceiling"),
        ("300 tokens", "300 tokens is not above the 360 already spent"),
        ("$1", "this run has no prices, so a cost ceiling cannot be checked"),
        ("99999999999999 tokens", "'99999999999999 tokens' is not a ceiling"),
    ],
)
def test_a_reply_that_raises_nothing_says_why(reply, problem):
    assert read_reply(reply, TOKENS, SPENT, None) == BudgetReply(problem=problem)


def test_raising_the_other_ceiling_only_is_not_enough():
    assert read_reply("$1", BOTH, SPENT, 0.00135) == BudgetReply(problem="250 tokens is not above the 360 already spent")


def test_a_flows_budget_grows_by_what_its_step_was_raised():
    whole = Budget(max_tokens=300, max_cost=1.0, ask_at_ceiling=True)
    given = Budget(max_tokens=180, max_cost=0.9, ask_at_ceiling=True)
    raised = raised_by(whole, given, given.model_copy(update={"max_tokens": 600}))
    assert raised is not None and (raised.max_tokens, raised.max_cost) == (720, 1.0)
    assert raised_by(whole, given, None) is whole
    assert raise_note(given, given.model_copy(update={"max_tokens": 600})) == (
        "token budget raised from 180 to 600 by the user"
    )


# ---- the choice: --ask-at-budget and [budget] ask_at_ceiling ---------------------------


def test_the_flag_and_the_config_key_go_into_the_runs_budget(tmp_path):
    assert command_line.parse_command(["--max-tokens", "9", "--ask-at-budget", "t"]).ask_at_budget is True
    assert command_line.parse_command(["--max-tokens", "9", "--no-ask-at-budget", "t"]).ask_at_budget is False
    assert command_line.parse_command(["--max-tokens", "9", "t"]).ask_at_budget is None
    settings = load_config(tmp_path, "[budget]\nask_at_ceiling = true\n")
    budget = run_budget(settings, ["default"], max_tokens=9)
    assert budget is not None and budget.ask_at_ceiling
    budget = run_budget(settings, ["default"], max_tokens=9, ask_at_ceiling=False)
    assert budget is not None and not budget.ask_at_ceiling


# ---- runs that ask (time-skipping server) --------------------------------------------


THREE_STEPS_THEN_DONE = [python_step("one"), python_step("two"), python_step("three"), terminate_step("done")]


async def reply(handle, text: str) -> str:
    for _ in range(200):  # a flow's step run may not have started yet
        try:
            question = await wait_for_question(handle)
            break
        except RPCError:
            await asyncio.sleep(0.05)
    else:
        raise AssertionError(f"run {handle.id} never started")
    await handle.execute_update(AgentWorkflow.answer, HumanAnswer(question_id=question.id, text=text))
    return question.text


async def test_a_raised_ceiling_lets_the_run_go_on(time_skipping_env, worker, settings, fake_llm):
    fake_llm.turns = THREE_STEPS_THEN_DONE
    handle = await start(time_skipping_env, settings, task="count", budget=TOKENS)
    asked = await reply(handle, "1000 tokens")
    result: AgentRunResult = await final_result(handle)

    assert asked == "Budget reached: 360 of 250 tokens. Reply with a new ceiling (e.g. 720 tokens) or 'stop'."
    assert (result.state, result.stop_reason, result.final_answer) == (AgentState.FINISHED, StopReason.TERMINATED, "done")
    assert len(fake_llm.completed()) == 4 and result.usage.total_tokens == 480
    assert result.raised_budget is not None and result.raised_budget.max_tokens == 1000
    assert await handle.query(AgentWorkflow.pending_question) is None


async def test_stop_ends_the_run_at_its_ceiling(time_skipping_env, worker, settings, fake_llm):
    fake_llm.turns = THREE_STEPS_THEN_DONE
    handle = await start(time_skipping_env, settings, task="count", budget=TOKENS)
    await reply(handle, "stop")
    result: AgentRunResult = await final_result(handle)

    assert (result.stop_reason, result.steps_taken, result.final_answer) == (StopReason.BUDGET, 3, "three")
    assert result.note == "token budget of 250 reached after step 3: 360 tokens spent; the user chose to stop"
    assert len(fake_llm.completed()) == 3 and result.raised_budget is None


async def test_a_reply_that_raises_nothing_is_asked_again_then_ends(time_skipping_env, worker, settings, fake_llm):
    fake_llm.turns = THREE_STEPS_THEN_DONE
    handle = await start(time_skipping_env, settings, task="count", budget=TOKENS)
    first = await reply(handle, "lots")
    second = await reply(handle, "300")
    third = await reply(handle, "banana")
    result: AgentRunResult = await final_result(handle)

    assert first.startswith("Budget reached")
    assert second.startswith("'lots' is not a ceiling. Budget reached: 360 of 250 tokens.")
    assert third.startswith("300 tokens is not above the 360 already spent. Budget reached")
    assert result.stop_reason == StopReason.BUDGET and len(fake_llm.completed()) == 3
    assert result.note.endswith("; no reply in 3 questions gave a higher ceiling")


async def test_a_question_nobody_answers_ends_the_run_at_its_timeout(time_skipping_env, worker, settings, fake_llm):
    fake_llm.turns = THREE_STEPS_THEN_DONE
    handle = await start(time_skipping_env, settings, task="count", budget=TOKENS)
    result: AgentRunResult = await final_result(handle)  # the time-skipping server jumps the hour

    assert (result.stop_reason, result.steps_taken) == (StopReason.BUDGET, 3)
    assert result.note == (
        "token budget of 250 reached after step 3: 360 tokens spent; no reply came within 3600 seconds"
    )


async def test_a_run_that_does_not_ask_ends_at_its_ceiling_as_before(time_skipping_env, worker, settings, fake_llm):
    fake_llm.turns = THREE_STEPS_THEN_DONE
    budget = TOKENS.model_copy(update={"ask_at_ceiling": False})
    result = await final_result(await start(time_skipping_env, settings, task="count", budget=budget))
    assert result.note == "token budget of 250 reached after step 3: 360 tokens spent"


async def test_a_flows_step_asks_and_its_raise_pays_for_the_next_steps(time_skipping_env, worker, settings, fake_llm):
    script = flow_budget_script(
        {1: [python_step("a"), python_step("b"), terminate_step("collected")], 2: [terminate_step("reported")]}
    )
    fake_llm.responder = script
    handle = await start_flow(time_skipping_env, settings, budget=Budget(max_tokens=300, ask_at_ceiling=True))
    child = time_skipping_env.client.get_workflow_handle(f"{handle.id}/step-1", result_type=AgentRunResult)
    # The plan spent 120: step 1's run had 180 left, and asks after its second think (240).
    asked = await reply(child, "600 tokens")
    result: PlanningFlowResult = await final_result(handle)

    assert asked.startswith("Budget reached: 240 of 180 tokens.")
    # Step 1 was raised by 420, so the flow's ceiling is 720: step 2 (120) and the summary run.
    assert result.outcome == FlowOutcome.COMPLETED, result.note
    assert [s.status for s in result.plan.steps] == [StepStatus.COMPLETED, StepStatus.COMPLETED]
    assert len(script.by_role["step-1"]) == 3 and len(script.by_role["step-2"]) == 1 and "summary" in script.by_role


# ---- the committed history ----------------------------------------------------------


async def test_a_run_whose_ceiling_the_user_raised_replays():
    name, workflow_id = SCENARIOS["budget-raised"]
    data = history_file(name)
    assert started_input(data)["budget"]["ask_at_ceiling"] is True
    # Three steps, two questions at the ceiling (one reply raised nothing), a fourth think.
    assert [a["activityType"]["name"] for a in scheduled_activities(data)] == [
        "prepare_workspace", *["think", "python_execute"] * 3, "think",
    ]
    updates = [
        e["workflowExecutionUpdateAcceptedEventAttributes"]["acceptedRequest"]["input"]["name"]
        for e in data["events"] if "workflowExecutionUpdateAcceptedEventAttributes" in e
    ]
    assert updates == ["answer", "answer"]
    result = completed_result(data)
    assert (result["stop_reason"], result["steps_taken"], result["final_answer"]) == ("terminated", 4, "counted")
    assert result["raised_budget"]["max_tokens"] == 1000
    assert (await replayer().replay_workflow(as_history(data, workflow_id))).replay_failure is None
