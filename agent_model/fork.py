"""A fork: a new run that starts from the state an earlier run had at the end
of one of its steps, in a directory of its own restored to that step.

Pure. The starter captures the origin's state by replaying its history
(runtime/fork.py), makes the fork's carried state here, and the fork's
workflow restores the files first (workflows/agent_fork.py) with the worker's
snapshots (activities/workspace_snapshots.py).
"""

from __future__ import annotations

from pydantic import BaseModel, Field, JsonValue

from agent_model.memory import Memory
from agent_model.messages import Role, user_message
from agent_model.payload import clip
from agent_model.run_state import RunState
from agent_model.think_context import ContextSync

SKIPPED_SHOWN = 20
"""Paths of files a restore could not bring back that the fork's model and
details name; the rest are counted."""
PATH_SHOWN = 200
"""Characters of one such path."""


class ForkOrigin(BaseModel):
    """Where a fork comes from: kept in its input, shown by `show` and the Web UI."""

    run_id: str
    """The origin's workflow id (a flow's step: the step's own run id)."""
    execution: str
    """The origin execution (Temporal run id) in which the step ended."""
    step: int
    workspace: str
    """The origin's run directory name, whose snapshots the fork restores."""
    directory: str = ""
    """The origin's run directory path on the workers, as its state had it."""
    started_at: float | None = None
    """When the origin run began (POSIX seconds): a flow's step that had no
    snapshot of its own yet had the files of the flow's newest snapshot before it."""


class RestoreRequest(BaseModel):
    """Bring directory `into` to the files `origin` had at the end of `step`
    of run `workflow_id` (the newest snapshot at or before it; none: empty)."""

    origin: str
    """The run directory name the snapshots were taken of."""
    workflow_id: str
    step: int
    into: str
    """The directory to restore (the same as `origin` for a rewind: in place)."""
    record_as: str | None = None
    """A fork's workflow id: the restored files become its own snapshot of
    `step`, so a fork of the fork finds them."""
    drop_later: bool = False
    """A rewind: the snapshots of later steps belong to the abandoned future."""
    earlier_than: float | None = None
    """When the run has no snapshot at or before `step`: restore the newest
    snapshot of the directory (any run's) taken before this time (POSIX
    seconds), i.e. what an earlier step of a flow left; None: an empty directory."""


class RestoreResult(BaseModel):
    directory: str
    """The restored directory's path on the worker."""
    snapshot_step: int | None = None
    """The step whose snapshot was restored (None: there was none, the directory is empty)."""
    restored: int = 0
    """Entries (files, directories, links) put back."""
    skipped: list[str] = Field(default_factory=list)
    """What could not be restored, one `path: why` each (bounded)."""
    skipped_count: int = 0


def fork_line(origin: ForkOrigin) -> str:
    return f"forked from {origin.run_id} at step {origin.step}"


def restore_note(result: RestoreResult) -> str | None:
    """What the fork's model is told when some files could not be restored."""
    if not result.skipped_count:
        return None
    shown = "\n".join(f"- {clip(line, PATH_SHOWN)}" for line in result.skipped[:SKIPPED_SHOWN])
    more = result.skipped_count - min(len(result.skipped), SKIPPED_SHOWN)
    tail = f"\n(and {more} more)" if more > 0 else ""
    return (
        "This run was forked from an earlier one; its working directory was restored as it was at the "
        f"end of step {result.snapshot_step}, except:\n{shown}{tail}"
    )


def moved_paths(value: JsonValue, old: str, new: str) -> JsonValue:
    """`value` (a tool's kept state) with every path in directory `old` moved
    to directory `new`: bash's directory, say, is the same place in the fork's
    own directory."""
    if isinstance(value, str):
        if old and (value == old or value.startswith(old.rstrip("/") + "/")):
            return new + value[len(old.rstrip("/")) :]
        return value
    if isinstance(value, list):
        return [moved_paths(item, old, new) for item in value]
    if isinstance(value, dict):
        return {key: moved_paths(item, old, new) for key, item in value.items()}
    return value


def with_task(memory: Memory, task: str) -> Memory:
    """The memory with its first user message (the task) replaced by `task`."""
    replaced = memory.model_copy(deep=True)
    for index, message in enumerate(replaced.messages):
        if message.role == Role.USER:
            kept = Memory()
            kept.add(user_message(task))  # cut and measured as the run's own task was
            replaced.messages[index] = kept.messages[0]
            replaced.sizes[index] = kept.sizes[0]
            replaced.tokens[index] = kept.tokens[0]
            return replaced
    replaced.add(user_message(task))
    return replaced


def forked_state(
    captured: RunState,
    fork_id: str,
    *,
    task: str | None = None,
    message: str | None = None,
    llm: str | None = None,
) -> RunState:
    """The state a fork of `captured` (the origin's state at the end of its
    step) starts from: the origin's conversation, records, plans and tool
    state; a run that had ended goes on; the directory is left for the fork's
    workflow to restore; the worker's cached window starts empty."""
    assert captured.profile is not None
    state = captured.model_copy(deep=True)
    memory = with_task(state.memory, task) if task is not None else state.memory
    if message is not None:
        memory.add(user_message(message))
    profile = captured.profile.model_copy(update={"llm": llm}) if llm is not None else captured.profile
    return state.model_copy(
        update={
            "context": ContextSync(key=f"{fork_id}/fork"),
            "profile": profile,
            "memory": memory,
            "directory": "",
            "steps_before": state.step,
            "earlier_runs": [],
            "final_answer": None,
            "note": None,
            "empty_replies": 0,
        }
    )
