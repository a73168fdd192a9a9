"""What the workflow of a fork does besides going on as a continued run:
restore its directory first, and say where it comes from."""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from agent_model.activity_specs import RESTORE_WORKSPACE, RESTORE_WORKSPACE_CONFIG
    from agent_model.fork import RestoreRequest, RestoreResult, fork_line, moved_paths, restore_note
    from agent_model.messages import user_message
    from agent_model.run import AgentRunInput
    from agent_model.run_state import RunState
    from agent_model.tool_spec import scheduled


def restore_due(run: AgentRunInput, state: RunState) -> bool:
    """A fork's first execution, before its directory is restored (a
    continued execution carries the directory, and restores nothing)."""
    return run.forked_from is not None and not state.directory


async def restore_fork_directory(run: AgentRunInput, state: RunState, workspace: str) -> None:
    """Restore the fork's directory to the origin's files at the fork's step;
    the model is told what could not be restored."""
    origin = run.forked_from
    assert origin is not None
    result = await workflow.execute_activity(
        RESTORE_WORKSPACE,
        RestoreRequest(
            origin=origin.workspace, workflow_id=origin.run_id, step=origin.step, into=workspace,
            record_as=workflow.info().workflow_id, earlier_than=origin.started_at,
        ),
        result_type=RestoreResult,
        **scheduled(RESTORE_WORKSPACE_CONFIG, f"restore the files of {origin.run_id} at step {origin.step}"),
    )
    state.directory = result.directory
    state.tool_state = {
        tool: moved_paths(kept, origin.directory, result.directory) for tool, kept in state.tool_state.items()
    }
    note = restore_note(result)
    if note is not None:
        state.memory.add(user_message(note))


def origin_line(run: AgentRunInput) -> str | None:
    """The Web UI's details line of a fork."""
    return None if run.forked_from is None else f"**{fork_line(run.forked_from)}**"
