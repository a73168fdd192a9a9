"""The workflow's own activities (think, prepare_workspace), as the workflow
schedules them: names, error types and options. Pure, like the tool specs, so
workflow code never imports an activity's implementation."""

from __future__ import annotations

from agent_model.errors import (
    CONTEXT_MISSING_ERROR,
    LLM_REQUEST_REJECTED_ERROR,
    REPLY_TOO_LARGE_ERROR,
    TOKEN_LIMIT_ERROR,
    UNKNOWN_LLM_PROFILE_ERROR,
)
from temporalio import workflow

from agent_model.tool_spec import CLOSED_WITHOUT_IT, WAIT_FOR_THE_CALL, Retries, Timeout, activity_config

THINK = "think"
PREPARE_WORKSPACE = "prepare_workspace"

NON_RETRYABLE_THINK_ERRORS = (
    TOKEN_LIMIT_ERROR,
    REPLY_TOO_LARGE_ERROR,
    LLM_REQUEST_REJECTED_ERROR,
    UNKNOWN_LLM_PROFILE_ERROR,
    CONTEXT_MISSING_ERROR,
)
MAX_THINK_RETRY_SECONDS = 60.0
"""Longest wait between think attempts, a Retry-After header included."""

THINK_CONFIG = activity_config(
    start_to_close=Timeout(600, "one model call may legitimately take minutes (long outputs, slow models)"),
    heartbeat=Timeout(
        4,
        "heartbeats come every second: 4 s of silence (three missed beats; the event loop stalled "
        "at most ~0.35 s under load, BENCHMARKS.md P4) means a dead worker",
    ),
    retries=Retries(
        6,
        "rate limits and outages pass (OpenManus waited up to 60 s, 6 attempts); the types below "
        "get the same answer every time",
        initial_seconds=1,
        backoff=2.0,
        maximum_interval_seconds=MAX_THINK_RETRY_SECONDS,
        non_retryable=NON_RETRYABLE_THINK_ERRORS,
    ),
    cancellation=WAIT_FOR_THE_CALL,
)

PREPARE_WORKSPACE_TIMEOUT = Timeout(
    10,
    "creating a directory takes milliseconds; 10 s covers a slow disk and bounds how long a run "
    "waits when its worker dies mid-call (no heartbeat)",
)
PREPARE_WORKSPACE_RETRIES = Retries(5, "idempotent (mkdir exist_ok), so retrying a transient failure is safe")
PREPARE_WORKSPACE_CONFIG = activity_config(
    start_to_close=PREPARE_WORKSPACE_TIMEOUT, retries=PREPARE_WORKSPACE_RETRIES, cancellation=WAIT_FOR_THE_CALL
)
PREPARE_WORKSPACE_CONFIG_BEFORE_WAITING = activity_config(
    start_to_close=PREPARE_WORKSPACE_TIMEOUT, retries=PREPARE_WORKSPACE_RETRIES, cancellation=CLOSED_WITHOUT_IT
)
"""How runs begun before the patch WORKSPACE_CANCEL_PATCH prepare their directory."""
WORKSPACE_CANCEL_PATCH = "cancel-waits-for-workspace"
"""Asked in AgentWorkflow.run: a run cancelled while its directory is made
ends only once that call has (docs/deploying.md)."""
PREPARE_WORKSPACE_LOCALLY = workflow.LocalActivityConfig(
    start_to_close_timeout=PREPARE_WORKSPACE_TIMEOUT.delta,
    retry_policy=PREPARE_WORKSPACE_RETRIES.policy(),
    cancellation_type=WAIT_FOR_THE_CALL.kind,
)
"""prepare_workspace as a local activity: the worker running the run's first
workflow task makes the directory inside that task, so the first think is
scheduled by it too (no activity task and workflow task of their own: 6
events and a round trip of ~20 ms less per run, bench P13)."""
WORKSPACE_IN_FIRST_TASK_PATCH = "workspace-in-first-task"
"""Asked in AgentWorkflow.run: a new run makes its directory with
PREPARE_WORKSPACE_LOCALLY; runs begun before it schedule prepare_workspace."""

RESTORE_WORKSPACE = "restore_workspace"

RESTORE_WORKSPACE_CONFIG = activity_config(
    start_to_close=Timeout(
        600,
        "copies back up to the run's disk quota (1 GiB by default) of snapshot blobs: seconds on a "
        "local disk, minutes on a slow shared one",
    ),
    heartbeat=Timeout(10, "the worker beats every second while it copies: 10 s of silence is a dead worker"),
    retries=Retries(
        3,
        "idempotent (the directory is made to match one manifest, whatever it held), so a retry after a "
        "lost worker or a transient I/O error is safe",
    ),
    cancellation=WAIT_FOR_THE_CALL,
)
