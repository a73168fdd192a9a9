"""Search attributes that make runs filterable in the Web UI and in
`temporal workflow list --query 'AgentState="RUNNING"'`.

The embedded server registers them at start (runtime/embedded_server.py); on
another cluster register them once (docs/cluster.md). A run uses them
only when it was started with them, so a cluster without them still works.
"""

from temporalio import workflow
from temporalio.common import SearchAttributeKey, SearchAttributePair, SearchAttributeUpdate, TypedSearchAttributes

AGENT_NAME = SearchAttributeKey.for_keyword("AgentName")
"""The agent profile, or "planning-flow" for a PlanningFlow."""
FLOW_AGENT_NAME = "planning-flow"
"""The AgentName value of a PlanningFlow run."""
AGENT_STATE = SearchAttributeKey.for_keyword("AgentState")
"""IDLE, RUNNING, FINISHED, ERROR, CANCELLED."""
AGENT_STEP = SearchAttributeKey.for_int("AgentStep")
"""Steps taken so far (for a flow: plan steps finished)."""

ALL = (AGENT_NAME, AGENT_STATE, AGENT_STEP)

AGENT_STEP_INTERVAL = 5
"""An agent run publishes AgentStep every 5 steps while its state stays the
same, and exactly whenever the state changes (so a finished run shows its last
step). Each upsert is a command plus a visibility write, ~2.5 ms of server CPU
(BENCHMARKS.md); the current step is always in the run's details and its
`status` query."""


def initial(agent: str, state: str = "RUNNING") -> TypedSearchAttributes:
    """What the starter sets when it starts a run."""
    return TypedSearchAttributes(
        [SearchAttributePair(AGENT_NAME, agent), SearchAttributePair(AGENT_STATE, state), SearchAttributePair(AGENT_STEP, 0)]
    )


def _run_has_them() -> bool:
    # get(), not `in`: the SDK types TypedSearchAttributes as a collection of pairs, not of keys.
    return workflow.info().typed_search_attributes.get(AGENT_STATE) is not None


def for_child(agent: str) -> TypedSearchAttributes | None:
    """Inside a workflow: a child run's attributes, if this run has them (a
    cluster without them registered would refuse the child's start)."""
    if not _run_has_them():
        return None
    return initial(agent)


def upsert(state: str, step: int, step_interval: int = 1) -> None:
    """Inside a workflow: publish state and step, if the run was started with
    them. The step alone is published once it moved `step_interval` or more."""
    if not _run_has_them():
        return
    current = workflow.info().typed_search_attributes
    updates: list[SearchAttributeUpdate] = []
    if current.get(AGENT_STATE) != state:
        updates.append(AGENT_STATE.value_set(state))
    published_step = current.get(AGENT_STEP)
    if published_step != step and (
        updates or published_step is None or abs(step - published_step) >= step_interval
    ):
        updates.append(AGENT_STEP.value_set(step))
    if updates:
        workflow.upsert_search_attributes(updates)
