"""A run carries everything that decides its commands: the starter resolves
the agent profile and the continue-as-new thresholds into the run's input,
and continue-as-new keeps them (tests/test_deploy_open_runs.py deploys new
code under open runs)."""

from __future__ import annotations

from agent_model import continuation
from agent_model.continuation import HISTORY_EVENTS_PER_RUN, RECORDS_LIMIT, continued_input, current_limits
from agent_model.memory import Memory
from agent_model.profiles import DATA_ANALYSIS, MANUS
from agent_model.run import RunState
from agent_model.think_context import ContextSync
from runtime.run_start import agent_run_input, planning_flow_input
from tools import TOOLS, with_tool_terms
from agent_model.tool_terms import ActivityTerms


# ---- the starter's inputs, without a server ---------------------------------------------


def test_the_starters_run_input_holds_the_resolved_profile_and_thresholds():
    run = agent_run_input("t", agent="manus", max_steps=5, llm="fast", mcp_servers=("docs",))
    assert run.profile == with_tool_terms(MANUS.model_copy(update={"max_steps": 5, "llm": "fast", "mcp_servers": ["docs"]}))
    assert set(run.profile.tool_terms) == {*MANUS.tools, "mcp"}  # mcp: the run has MCP servers
    assert run.profile.tools == MANUS.tools and run.profile.system_prompt == MANUS.system_prompt
    assert run.continuation == current_limits()
    assert (run.continuation.history_events, run.continuation.records_bytes) == (HISTORY_EVENTS_PER_RUN, RECORDS_LIMIT)
    # Through the payload converter's JSON, as the workflow receives it.
    assert type(run).model_validate_json(run.model_dump_json()) == run


def test_every_activity_tools_options_survive_the_input_unchanged():
    for spec in TOOLS.values():
        if spec.activity is not None:
            terms = ActivityTerms.model_validate_json(ActivityTerms.of(spec.activity).model_dump_json())
            assert terms.config() == spec.activity, spec.name


def test_the_starters_flow_input_holds_every_agents_profile_and_the_thresholds():
    flow = planning_flow_input("t", agents=("manus", "data_analysis"), timeout=600, max_steps=4)
    assert flow.profiles == {"manus": with_tool_terms(MANUS), "data_analysis": with_tool_terms(DATA_ANALYSIS)}
    assert flow.continuation == current_limits()
    assert flow.child_profile("data_analysis") == with_tool_terms(DATA_ANALYSIS)


def test_a_continued_execution_keeps_the_runs_thresholds(monkeypatch):
    run = agent_run_input("t", agent="manus")
    monkeypatch.setattr(continuation, "HISTORY_EVENTS_PER_RUN", 1)  # a later worker's code
    carried = RunState(profile=run.profile, directory="/w", step=1, memory=Memory(), context=ContextSync(key="k"))
    continued = continued_input(run, carried, "w", run.continuation)
    assert continued.continuation.history_events == HISTORY_EVENTS_PER_RUN
    assert continued.carried.profile == with_tool_terms(MANUS)


def test_a_workflow_tools_own_activities_are_scheduled_as_the_run_started():
    """The browser's actions and MCP's calls are scheduled by workflow code of
    those tools: their options travel in the input too."""
    from datetime import timedelta

    from agent_model.run_state import RunState
    from tools.mcp_tools import NAME as MCP
    from workflows.agent_tools import RunTools

    profile = with_tool_terms(MANUS.model_copy(update={"mcp_servers": ["docs"]}))
    assert set(profile.tool_terms["browser_use"].own_activities) == {"act", "act_on_session", "close", "extract"}
    assert set(profile.tool_terms[MCP].own_activities) == {"list", "call"}
    for name in ("browser_use", MCP):
        for key, terms in profile.tool_terms[name].own_activities.items():
            assert terms.config() == TOOLS[name].own_activities[key], (name, key)

    started = profile.model_copy(deep=True)
    act = started.tool_terms["browser_use"].own_activities["act"]
    started.tool_terms["browser_use"].own_activities["act"] = act.model_copy(update={"start_to_close_seconds": 99})
    tools = RunTools(RunState(profile=started, context=ContextSync(key="k")), "w", lambda: None)
    assert tools.options("browser_use", "act")["start_to_close_timeout"] == timedelta(seconds=99)
    older = RunTools(RunState(profile=MANUS, context=ContextSync(key="k")), "w", lambda: None)  # no terms
    assert older.options(MCP, "call") == TOOLS[MCP].own_activities["call"]
