"""Budgets: the cost arithmetic, the price table in config, the starter's
options, and runs and flows that end at their ceiling (issue 21)."""

from __future__ import annotations

import uuid

import pytest
from temporalio.api.sdk.v1 import WorkflowMetadata

from agent_model.budget import (
    Budget,
    Prices,
    ceiling_note,
    ceiling_reached,
    cost_of,
    remaining,
    run_cost,
    spent_text,
)
from agent_model.flow import FlowOutcome, PlanningFlowResult
from agent_model.plan import StepStatus
from agent_model.run import AgentRunResult
from agent_model.state import AgentState, StopReason
from agent_model.usage import TokenUsage
from runtime import command_line
from runtime.run_start import run_budget
from runtime.user_errors import UsageError
from testkit.fake_openai import Reply, call
from testkit.settings import config_error, load_config, make_settings, write_config
from testkit.run_results import final_result
from tests.test_agent_workflow import start
from tests.test_planning_flow import FlowScript, plan_reply, start_flow
from tests.test_starter_cli import assert_one_line_error, dev_address

PRICES = Prices(input=2.5, output=10.0)
"""USD per million tokens: a step of 100 prompt and 20 completion tokens costs $0.00045."""
STEP_USAGE = (100, 20)


def python_step(content: str, usage: tuple[int, int] = STEP_USAGE) -> Reply:
    return Reply(content=content, tool_calls=[call("python_execute", {"code": "print(1)"})], usage=usage)


def terminate_step(answer: str, usage: tuple[int, int] = STEP_USAGE) -> Reply:
    return Reply(tool_calls=[call("terminate", {"status": "success", "answer": answer})], usage=usage)


# ---- the arithmetic ------------------------------------------------------------------


def test_cost_prices_prompt_completion_and_cached_tokens():
    usage = TokenUsage(prompt_tokens=1_000_000, completion_tokens=500_000)
    assert cost_of(usage, PRICES) == pytest.approx(2.5 + 5.0)
    cached = usage.model_copy(update={"cached_prompt_tokens": 400_000})
    # Without a cached price, cached tokens cost as input; with one, at it.
    assert cost_of(cached, PRICES) == pytest.approx(7.5)
    assert cost_of(cached, PRICES.model_copy(update={"cached_input": 1.25})) == pytest.approx(0.6 * 2.5 + 0.4 * 1.25 + 5.0)
    # A provider that reports more cached than prompt tokens is not believed past the prompt.
    odd = TokenUsage(prompt_tokens=10, completion_tokens=0, cached_prompt_tokens=50)
    assert cost_of(odd, Prices(input=1.0, output=1.0, cached_input=0.0)) == 0.0


def test_cost_is_unknown_without_prices():
    usage = TokenUsage(prompt_tokens=100, completion_tokens=20)
    assert cost_of(usage, None) is None
    assert run_cost(None, "default", usage) is None
    assert run_cost(Budget(prices={"fast": PRICES}), "default", usage) is None
    assert run_cost(Budget(prices={"default": PRICES}), "default", usage) == pytest.approx(0.00045)


def test_usage_adds_cached_tokens_and_leaves_zero_out_of_payloads():
    total = TokenUsage(prompt_tokens=1, cached_prompt_tokens=1) + TokenUsage(prompt_tokens=2, completion_tokens=3)
    assert (total.prompt_tokens, total.completion_tokens, total.cached_prompt_tokens) == (3, 3, 1)
    assert "cached" not in TokenUsage(prompt_tokens=5).model_dump_json()


@pytest.mark.parametrize(
    "budget, tokens, expected",
    [
        (Budget(max_tokens=1000), 999, None),
        (Budget(max_tokens=1000), 1000, "token budget of 1000"),  # reached at the ceiling, not past it
        # $0.50 at $2.50 per million prompt tokens: 200_000 of them.
        (Budget(max_cost=0.5, prices={"default": PRICES}), 199_999, None),
        (Budget(max_cost=0.5, prices={"default": PRICES}), 200_000, "cost budget of $0.50"),
        (Budget(max_tokens=10**9, max_cost=0.5, prices={"default": PRICES}), 300_000, "cost budget of $0.50"),
        (Budget(prices={"default": PRICES}), 10**9, None),  # prices alone set no ceiling
        (None, 10**9, None),
    ],
)
def test_the_ceiling_is_reached_once_the_usage_meets_it(budget, tokens, expected):
    usage = TokenUsage(prompt_tokens=tokens)
    assert ceiling_reached(budget, usage, run_cost(budget, "default", usage)) == expected


def test_the_note_says_which_ceiling_when_and_what_was_spent():
    usage = TokenUsage(prompt_tokens=300, completion_tokens=60)
    assert ceiling_note("token budget of 250", "step 3", usage, None) == (
        "token budget of 250 reached after step 3: 360 tokens spent"
    )
    assert spent_text(usage, 0.00135) == "360 tokens, $0.0014"
    assert spent_text(usage, 12.345) == "360 tokens, $12.35"


def test_a_child_gets_what_is_left():
    budget = Budget(max_tokens=1000, max_cost=1.0, prices={"default": PRICES})
    left = remaining(budget, TokenUsage(prompt_tokens=300, completion_tokens=100), 0.25)
    assert (left.max_tokens, left.max_cost, left.prices) == (600, pytest.approx(0.75), budget.prices)
    assert remaining(Budget(prices={"default": PRICES}), TokenUsage(prompt_tokens=5), 0.1) == Budget(
        prices={"default": PRICES}
    )
    assert remaining(None, TokenUsage(), None) is None


# ---- the price table in config -------------------------------------------------------


def test_prices_per_llm_profile(tmp_path):
    settings = load_config(
        tmp_path,
        "[llm]\nmodel = 'gpt-4o'\napi_key = 'k'\nprice_per_million_input = 2.5\nprice_per_million_output = 10\n"
        "[llm.mini]\nmodel = 'gpt-4o-mini'\nprice_per_million_input = 0.15\nprice_per_million_output = 0.6\n"
        "price_per_million_cached_input = 0.075\n"
        "[llm.same]\nmodel = 'gpt-4o'\n",
    )
    assert settings.llm["default"].prices == Prices(input=2.5, output=10)
    assert settings.llm["mini"].prices == Prices(input=0.15, output=0.6, cached_input=0.075)
    assert settings.llm["same"].prices == Prices(input=2.5, output=10)  # merged over [llm], as every key
    assert load_config(tmp_path, "[llm]\napi_key = 'k'\n").llm["default"].prices is None


@pytest.mark.parametrize(
    "text, expected",
    [
        ("price_per_million_input = 2.5\n", "[llm] price_per_million_input needs price_per_million_output too"),
        ("price_per_million_output = 10\n", "[llm] price_per_million_output needs price_per_million_input too"),
        ("price_per_million_cached_input = 1\n", "[llm] price_per_million_cached_input needs price_per_million_input"),
        ("price_per_million_input = -1\nprice_per_million_output = 1\n", "[llm] price_per_million_input"),
        ("price_per_million_input = 'cheap'\nprice_per_million_output = 1\n", "[llm] price_per_million_input"),
        ("price_per_million_input = inf\nprice_per_million_output = 1\n", "[llm] price_per_million_input"),
    ],
)
def test_bad_prices_are_one_line_config_errors(tmp_path, text, expected):
    assert expected in config_error(tmp_path, "[llm]\napi_key = 'k'\n" + text)


def test_a_named_profile_with_half_a_price_is_named(tmp_path):
    text = "[llm]\napi_key = 'k'\n[llm.mini]\nprice_per_million_input = 1\n"
    assert "[llm.mini] price_per_million_input needs price_per_million_output" in config_error(tmp_path, text)


# ---- what the starter resolves into a run's input ------------------------------------


def test_the_starter_resolves_ceilings_and_the_prices_of_the_llms_used(tmp_path):
    settings = make_settings("http://127.0.0.1:9/v1", tmp_path, price_per_million_input=2.5, price_per_million_output=10)
    assert run_budget(settings, ["default"]) == Budget(prices={"default": PRICES})
    assert run_budget(settings, ["default"], 500, 0.5) == Budget(max_tokens=500, max_cost=0.5, prices={"default": PRICES})
    unpriced = make_settings("http://127.0.0.1:9/v1", tmp_path)
    assert run_budget(unpriced, ["default"]) is None
    assert run_budget(unpriced, ["default"], max_tokens=500) == Budget(max_tokens=500)
    with pytest.raises(UsageError, match=r"--max-cost needs the prices .* in \[llm\]$"):
        run_budget(unpriced, ["default"], max_cost=0.5)


# ---- the command line ----------------------------------------------------------------


@pytest.mark.parametrize(
    "argv, fields",
    [
        (["--max-tokens", "5000", "do it"], dict(max_tokens=5000, max_cost=None)),
        (["run", "--max-cost", "0.25", "do it"], dict(max_tokens=None, max_cost=0.25)),
        (["--flow", "planning", "--max-tokens", "9", "--max-cost", "2", "do it"], dict(max_tokens=9, max_cost=2.0)),
        (["mcp", "--max-tokens", "7", "do it"], dict(max_tokens=7, max_cost=None)),
        (["do it"], dict(max_tokens=None, max_cost=None)),
    ],
)
def test_budget_options_parse(argv, fields):
    run = command_line.parse_command(argv)
    assert {name: getattr(run, name) for name in fields} == fields


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["--max-tokens", "0", "do it"], "--max-tokens must be at least 1"),
        (["--max-tokens", "lots", "do it"], "argument --max-tokens: invalid int value: 'lots'"),
        (["--max-cost", "-1", "do it"], "--max-cost must be a positive number of US dollars"),
        (["--max-cost", "nan", "do it"], "--max-cost must be a positive number of US dollars"),
        (["--max-cost", "inf", "do it"], "--max-cost must be a positive number of US dollars"),
        (["--max-cost", "$1", "do it"], "argument --max-cost: invalid float value: '$1'"),
    ],
)
def test_bad_budget_values_are_one_line(cli, argv, expected):
    assert_one_line_error(cli(*argv), expected)


def test_max_cost_without_prices_is_one_line_before_any_server(cli, tmp_path):
    config = write_config(tmp_path, "[llm]\nmodel = 'gpt-4o'\napi_key = 'sk-x'\n")
    proc = cli("--config", str(config), "--max-cost", "0.5", "do it")  # TEMPORAL_ADDRESS answers nothing
    assert_one_line_error(proc, f"--max-cost needs the prices of every LLM the run uses: {config} has no")
    flow = cli("--config", str(config), "--flow", "planning", "--max-cost", "0.5", "do it")
    assert_one_line_error(flow, "price_per_million_input and price_per_million_output in [llm]")


# ---- runs at their ceiling (time-skipping server) -------------------------------------


async def test_a_run_stops_before_the_think_that_would_start_with_its_tokens_spent(
    time_skipping_env, worker, settings, fake_llm
):
    fake_llm.turns = [python_step("one"), python_step("two"), python_step("three"), terminate_step("never")]
    handle = await start(time_skipping_env, settings, task="count", budget=Budget(max_tokens=250))
    result = await final_result(handle)

    # 120 tokens a step: 240 after step 2 is under 250, 360 after step 3 is not.
    assert (result.state, result.stop_reason, result.steps_taken) == (AgentState.FINISHED, StopReason.BUDGET, 3)
    assert len(fake_llm.completed()) == 3  # the fourth think never started
    assert result.note == "token budget of 250 reached after step 3: 360 tokens spent"
    assert result.final_answer == "three"  # the last assistant text, as the run has it
    assert result.usage.total_tokens == 360 and result.cost is None
    assert [r.cost for r in result.steps] == [None] * 3
    assert not result.succeeded


async def test_a_cost_budget_prices_each_step_and_stops_at_its_ceiling(time_skipping_env, worker, settings, fake_llm):
    fake_llm.turns = [python_step("one"), python_step("two"), python_step("three"), terminate_step("never")]
    budget = Budget(max_cost=0.001, prices={"default": PRICES})
    handle = await start(time_skipping_env, settings, task="count", budget=budget)
    result = await final_result(handle)

    # $0.00045 a step: $0.0009 after step 2, $0.00135 after step 3.
    assert (result.stop_reason, result.steps_taken) == (StopReason.BUDGET, 3)
    assert [r.cost for r in result.steps] == [pytest.approx(0.00045)] * 3
    assert result.cost == pytest.approx(0.00135)
    assert result.note == "cost budget of $0.0010 reached after step 3: 360 tokens, $0.0014 spent"
    details = (await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)).current_details
    assert "**cost** $0.0014" in details and "**budget** $0.0014 of $0.0010 spent" in details, details


async def test_a_run_under_its_budget_ends_as_it_would_without_one(time_skipping_env, worker, settings, fake_llm):
    fake_llm.turns = [python_step("one"), terminate_step("done")]
    result = await final_result(await start(time_skipping_env, settings, task="count", budget=Budget(max_tokens=10_000)))
    assert (result.stop_reason, result.final_answer, result.usage.total_tokens) == (StopReason.TERMINATED, "done", 240)


# ---- a flow's budget: the planner's thinks and every step's run together -------------


def flow_budget_script(steps: dict[int, list]) -> FlowScript:
    plan = plan_reply("Collect", "Report")
    return FlowScript(Reply(tool_calls=plan.tool_calls, usage=STEP_USAGE), steps)


async def test_a_flow_does_not_start_the_step_its_budget_cannot_pay_for(time_skipping_env, worker, settings, fake_llm):
    script = flow_budget_script({1: [terminate_step("collected")], 2: [terminate_step("reported")]})
    fake_llm.responder = script
    handle = await start_flow(time_skipping_env, settings, budget=Budget(max_tokens=200))
    result: PlanningFlowResult = await final_result(handle)

    # The plan (120) and step 1 (120) spend 240 of 200: step 2 and the summary's think never start.
    assert result.outcome == FlowOutcome.BUDGET and not result.succeeded
    assert result.note == "token budget of 200 reached after step 1: 240 tokens spent; step 2 and after were not started"
    assert [(o.index, o.status, o.answer) for o in result.steps] == [(0, StepStatus.COMPLETED, "collected")]
    assert [s.status for s in result.plan.steps] == [StepStatus.COMPLETED, StepStatus.NOT_STARTED]
    assert set(script.by_role) == {"plan", "step-1"}
    assert "collected" in result.summary  # the flow's own account of what it has
    assert result.usage.total_tokens == 240


async def test_a_flows_step_gets_what_is_left_and_stops_there(time_skipping_env, worker, settings, fake_llm):
    script = flow_budget_script({1: [python_step("a"), python_step("b"), terminate_step("never")]})
    fake_llm.responder = script
    budget = Budget(max_tokens=300, max_cost=1.0, prices={"default": PRICES})
    handle = await start_flow(time_skipping_env, settings, budget=budget)
    result: PlanningFlowResult = await final_result(handle)

    # The step's run had 180 tokens left: it stops after its second think (240), and the flow with it.
    child = await final_result(time_skipping_env.client.get_workflow_handle(f"{handle.id}/step-1", result_type=AgentRunResult))
    assert (child.stop_reason, child.steps_taken) == (StopReason.BUDGET, 2)
    assert child.note == "token budget of 180 reached after step 2: 240 tokens, $0.0009 spent"
    assert result.outcome == FlowOutcome.BUDGET and len(script.by_role["step-1"]) == 2
    assert "replan" not in script.by_role
    assert result.note.startswith("token budget of 300 reached after step 1: 360 tokens, $0.0014 spent; step 1 is blocked")
    assert result.cost == pytest.approx(0.00135)


# ---- the starter: a run with --max-tokens, its final lines and `show` (dev server) ----


async def test_a_cli_run_with_max_tokens_ends_at_the_ceiling_and_shows_what_it_spent(cli, dev_env, fake_llm, tmp_path):
    fake_llm.turns = [python_step("one"), python_step("two"), python_step("three"), terminate_step("never")]
    config = write_config(
        tmp_path,
        f"[llm]\nmodel = 'gpt-4o'\nbase_url = '{fake_llm.base_url}'\napi_key = 'test-key'\n"
        "price_per_million_input = 2.5\nprice_per_million_output = 10\n[tools]\nsandbox = 'none'\n",
    )
    env = {
        "TEMPORAL_ADDRESS": dev_address(dev_env),
        "TEMPORAL_TASK_QUEUE": f"budget-{uuid.uuid4().hex[:8]}",
        "WORKSPACE_ROOT": str(tmp_path / "ws"),
        "OPENAI_API_KEY": "test-key",  # the fake LLM's; the environment's key wins over the file's
    }
    run_id = f"budget-cli-{uuid.uuid4().hex[:8]}"
    proc = await cli.in_thread(
        "--config", str(config), "--worker", "always", "--id", run_id, "--max-tokens", "250", "count", env_extra=env
    )
    assert proc.returncode == 1, proc.stderr  # ended, but not by finishing its task
    assert "budget spent: the run's token or cost budget ran out before the task was done (3 steps, 360 tokens, $0.0014)" in proc.stdout
    assert "note: token budget of 250 reached after step 3: 360 tokens, $0.0014 spent" in proc.stdout
    assert len(fake_llm.completed()) == 3

    shown = await cli.in_thread("show", run_id, "--config", str(config), "--worker", "never", env_extra=env)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.count("── step") == 3
    assert "── step 3 ── 100+20 tokens, $0.0004" in shown.stdout
