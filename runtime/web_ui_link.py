"""The link the starter prints for a run: the Web UI's User Metadata tab of
its current execution, where the run's task (Summary) and current details
are: its step, and the question or the call it waits on. The run's bare page
opens on the Timeline tab, where none of that shows (Web UI 2.54 routes
/namespaces/NS/workflows/ID/RUN/user-metadata)."""

from __future__ import annotations

from temporalio.client import Client, WorkflowHandle
from temporalio.service import RPCError

from runtime.embedded_server import web_ui_url


async def run_link(client: Client, handle: WorkflowHandle) -> str:
    """The link to `handle`'s run; its bare page when its execution cannot be read."""
    execution = handle.result_run_id or handle.run_id
    if execution is None:  # a run found by its id (attach, rewind): its current execution
        try:
            execution = (await handle.describe()).run_id
        except RPCError:
            execution = None
    return web_ui_url(handle.id, client.namespace, execution)
