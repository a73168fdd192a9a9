"""Starting a run: refusing a task that cannot fit the model, the workflow
start itself, and what a detached start says about its worker."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Iterable
from datetime import timedelta
from typing import TextIO

from temporalio.client import Client, WorkflowHandle
from temporalio.exceptions import WorkflowAlreadyStartedError

from agent_model.approval import ApprovalMode, ApprovalPolicy
from agent_model.budget import Budget
from agent_model.continuation import current_limits
from agent_model.flow import DEFAULT_PARALLEL_STEPS, PlanningFlowInput
from agent_model.messages import user_message
from agent_model.profiles import get_profile
from agent_model.session import SessionTerms
from agent_model.run import AgentRunInput, AgentRunResult, resolved_profile
from config.llm_settings import llm_where
from config.settings import Settings
from runtime import run_control
from runtime.user_errors import UsageError
from runtime.in_process_worker import worker_command
from runtime.task_queue import live_workers, picked_up
from tools import schemas, with_tool_terms
from workflows import search_attributes
from workflows.agent import AgentWorkflow
from workflows.planning import PlanningFlowWorkflow

SUMMARY_LENGTH = 120
"""Characters of the task shown as the run's summary in the Web UI."""


def check_llm_choice(settings: Settings, llm: str | None) -> None:
    """Refuse --llm NAME when the starter's config has no [llm.NAME]."""
    if llm is not None and llm not in settings.llm:
        known = ", ".join(sorted(settings.llm))
        where = f"{settings.source} has" if settings.config_file else "without a config file there is"
        raise UsageError(f"--llm {llm}: {where} no [llm.{llm}] (known: {known})")


def check_task_fits(settings: Settings, task: str, agents: tuple[str, ...], llm: str | None = None) -> None:
    """Refuse, before starting, an unknown --llm and a task that alone exceeds
    an agent's model input limit."""
    check_llm_choice(settings, llm)
    for agent in agents:
        profile = get_profile(agent)
        llm_settings = settings.llm_profile(llm or profile.llm)
        if llm_settings.max_input_tokens is None:
            continue
        from activities.token_count import count_prompt_tokens  # here: tiktoken only when a limit is set

        needed = count_prompt_tokens(
            llm_settings.model, [user_message(task)], profile.system_prompt, schemas(profile.tools)
        )
        if needed > llm_settings.max_input_tokens:
            raise UsageError(
                f"the task needs {needed} input tokens with agent {agent}, over max_input_tokens "
                f"{llm_settings.max_input_tokens} of {llm_settings.model}; shorten it"
            )


def run_budget(
    settings: Settings, llms: Iterable[str], max_tokens: int | None = None, max_cost: float | None = None,
    ask_at_ceiling: bool | None = None,
) -> Budget | None:
    """What a new run carries of budgets: its ceilings, the prices of the
    LLM profiles `llms` it uses and whether it asks at a ceiling (None: as
    `[budget] ask_at_ceiling` says); None when it has neither ceilings nor
    prices. --max-cost with a profile that has no prices is refused."""
    prices = {}
    for name in dict.fromkeys(llms):
        profile = settings.llm.get(name)
        if profile is not None and profile.prices is not None:
            prices[name] = profile.prices
        elif max_cost is not None:
            where = f"{settings.source} has" if settings.config_file else "without a config file there is"
            raise UsageError(
                f"--max-cost needs the prices of every LLM the run uses: {where} no price_per_million_input "
                f"and price_per_million_output in {llm_where(name)}"
            )
    if max_tokens is None and max_cost is None and not prices:
        return None
    ask = settings.budget.ask_at_ceiling if ask_at_ceiling is None else ask_at_ceiling
    return Budget(max_tokens=max_tokens, max_cost=max_cost, prices=prices, ask_at_ceiling=ask)


def run_llms(agent: str, llm: str | None) -> list[str]:
    """The LLM profile an agent run's thinks use."""
    return [llm or get_profile(agent).llm]


def flow_llms(agents: Iterable[str], llm: str | None) -> list[str]:
    """The LLM profiles a flow's planner and its step runs use."""
    return [llm or "default", *(llm or get_profile(agent).llm for agent in agents)]


def summary_of(task: str) -> str:
    summary = " ".join(task.split())
    return summary if len(summary) <= SUMMARY_LENGTH else summary[: SUMMARY_LENGTH - 1] + "…"


def agent_run_input(
    task: str,
    *,
    agent: str,
    max_steps: int | None = None,
    steps_per_run: int | None = None,
    llm: str | None = None,
    mcp_servers: tuple[str, ...] | None = None,
    budget: Budget | None = None,
    approval: ApprovalPolicy | None = None,
    session: SessionTerms | None = None,
) -> AgentRunInput:
    """A new run's input, holding everything that decides its commands: the
    profile resolved now (overrides applied), its budget and prices, its
    approval gates, and this code's continue-as-new thresholds; later
    workers' code and config change none of them (raises UnknownAgent)."""
    run = AgentRunInput(
        task=task, agent=agent, max_steps=max_steps, steps_per_run=steps_per_run, llm=llm,
        mcp_servers=list(mcp_servers) if mcp_servers is not None else None, budget=budget,
        approval=approval, session=session,
    )
    return run.model_copy(update={"profile": with_tool_terms(resolved_profile(run)), "continuation": current_limits()})


def planning_flow_input(
    task: str,
    *,
    agents: tuple[str, ...],
    timeout: float,
    max_steps: int | None = None,
    steps_per_run: int | None = None,
    llm: str | None = None,
    budget: Budget | None = None,
    approval: dict[str, ApprovalPolicy] | None = None,
    parallel: int = DEFAULT_PARALLEL_STEPS,
) -> PlanningFlowInput:
    """A new flow's input, with its agents' profiles, its budget and the
    thresholds resolved now, for its planner and every step's run (raises
    UnknownAgent)."""
    flow = PlanningFlowInput(
        task=task,
        agents=list(agents),
        timeout_seconds=timeout,
        max_steps_per_agent=max_steps,
        steps_per_run=steps_per_run,
        budget=budget,
        **({"llm": llm, "agent_llm": llm} if llm else {}),
    )
    executors = dict.fromkeys([*flow.agents, flow.primary_agent])
    flow.profiles = {agent: with_tool_terms(get_profile(agent)) for agent in executors}
    flow.continuation = current_limits()
    flow.approval = approval
    flow.parallel_steps = parallel
    return flow


async def starting(start: Awaitable[WorkflowHandle]) -> WorkflowHandle:
    """The started run; an --id that a running run has is one line for the user."""
    try:
        return await start
    except WorkflowAlreadyStartedError as e:
        raise UsageError(
            f"run {e.workflow_id} is already running; attach to it with: python starter.py attach {e.workflow_id}"
        ) from None


async def start_agent_run(
    client: Client,
    settings: Settings,
    task: str,
    *,
    agent: str,
    max_steps: int | None,
    steps_per_run: int | None,
    run_id: str | None,
    llm: str | None = None,
    mcp_servers: tuple[str, ...] | None = None,
    max_tokens: int | None = None,
    max_cost: float | None = None,
    approve: ApprovalMode | None = None,
    ask_at_budget: bool | None = None,
    session: SessionTerms | None = None,
) -> WorkflowHandle:
    """Start an agent run (a session when `session` has its terms)."""
    budget = run_budget(settings, run_llms(agent, llm), max_tokens, max_cost, ask_at_budget)
    registered = await run_control.search_attributes_registered(client)
    run = agent_run_input(
        task, agent=agent, max_steps=max_steps, steps_per_run=steps_per_run, llm=llm, mcp_servers=mcp_servers,
        budget=budget,
        approval=settings.approval.policy_for(agent, approve), session=session,
    )
    started = await starting(client.start_workflow(
        AgentWorkflow.run,
        run,
        id=run_id or f"{agent}-{uuid.uuid4().hex[:12]}",
        task_queue=settings.task_queue,
        task_timeout=run.continuation.workflow_task_timeout() if run.continuation else None,
        static_summary=summary_of(task),
        search_attributes=search_attributes.initial(agent) if registered else None,
    ))
    # Not bound to the first execution: queries and the result follow the run
    # when it continues as new.
    return client.get_workflow_handle(
        started.id, first_execution_run_id=started.first_execution_run_id, result_type=AgentRunResult
    )


async def start_planning_flow(
    client: Client,
    settings: Settings,
    task: str,
    *,
    agents: tuple[str, ...],
    timeout: float,
    max_steps: int | None,
    steps_per_run: int | None,
    run_id: str | None,
    llm: str | None = None,
    max_tokens: int | None = None,
    max_cost: float | None = None,
    approve: ApprovalMode | None = None,
    ask_at_budget: bool | None = None,
    parallel: int = DEFAULT_PARALLEL_STEPS,
) -> WorkflowHandle:
    if settings.runflow_data_analysis and "data_analysis" not in agents:
        agents = (*agents, "data_analysis")  # OpenManus's [runflow] use_data_analysis_agent
    budget = run_budget(settings, flow_llms(agents, llm), max_tokens, max_cost, ask_at_budget)
    registered = await run_control.search_attributes_registered(client)
    approval = {agent: settings.approval.policy_for(agent, approve) for agent in agents}
    flow = planning_flow_input(
        task, agents=agents, timeout=timeout, max_steps=max_steps, steps_per_run=steps_per_run, llm=llm,
        budget=budget,
        approval=approval,
        parallel=parallel,
    )
    return await starting(client.start_workflow(
        PlanningFlowWorkflow.run,
        flow,
        id=run_id or f"flow-{uuid.uuid4().hex[:12]}",
        task_queue=settings.task_queue,
        task_timeout=flow.continuation.workflow_task_timeout() if flow.continuation else None,
        # Temporal's bound; the flow ends itself a little before it, with a result.
        execution_timeout=timedelta(seconds=timeout),
        static_summary=f"planning flow: {summary_of(task)}",
        search_attributes=search_attributes.initial(search_attributes.FLOW_AGENT_NAME) if registered else None,
    ))


async def report_worker_for_detached(client: Client, settings: Settings, handle: WorkflowHandle, out: TextIO) -> bool:
    """Say whether a worker took the detached run, and if none did, how to get
    one; True when one did."""
    live = await live_workers(client, settings.task_queue)
    if live:
        deadline = time.monotonic() + settings.pickup_wait_seconds
        while time.monotonic() < deadline:
            description = await handle.describe()
            if picked_up(description.raw_description):
                print(f"a worker is running ({', '.join(live[:3])}) and has taken the run", file=out)
                return True
            await asyncio.sleep(0.2)
        why = (
            f"no worker has taken the run within {settings.pickup_wait_seconds:g} s "
            "(the one the task queue lists has probably exited)"
        )
    else:
        why = f"no worker is running for task queue {settings.task_queue}"
    print(
        f"{why}: the run waits at step 0 until one does. Start one with `{worker_command(settings)}`, "
        f"or follow the run with `python starter.py attach {handle.id}`, which runs one in its process.",
        file=out,
    )
    return False
