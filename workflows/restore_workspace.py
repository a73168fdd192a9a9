"""RestoreWorkspaceWorkflow: one restore_workspace activity, for a rewind.

A rewind (runtime/run_control.py) resets the run's own workflow to the end of
a step; the files are brought back first by this workflow, on a worker of
the run's task queue (which holds the workspace), so the rewound run's
history and commands stay exactly those of the run: old rewound runs replay.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from agent_model.activity_specs import RESTORE_WORKSPACE, RESTORE_WORKSPACE_CONFIG
    from agent_model.fork import RestoreRequest, RestoreResult
    from agent_model.tool_spec import scheduled


@workflow.defn
class RestoreWorkspaceWorkflow:
    @workflow.run
    async def run(self, request: RestoreRequest) -> RestoreResult:
        return await workflow.execute_activity(
            RESTORE_WORKSPACE,
            request,
            result_type=RestoreResult,
            **scheduled(RESTORE_WORKSPACE_CONFIG, f"restore {request.into} to step {request.step}"),
        )
