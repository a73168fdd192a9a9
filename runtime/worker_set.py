"""A durable-manus worker process's Temporal workers, started and stopped as one.

Every worker polls the shared task queue (all workflows and activities). A
worker that can run browsers also polls a task queue of its own, where the
browser actions of the runs whose live page it holds are sent
(tools/browser_use.py): only it can serve them.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from temporalio.worker import Worker

from activities.server_contact import ServerContact, watch_in_this_context

if TYPE_CHECKING:
    from activities.browser.sessions import BrowserSessions
    from activities.mcp.pool import McpPool
    from activities.tools.run_sandbox import RunSandboxes
    from runtime.tracing import Tracing


class WorkerSet:
    """Used like one temporalio Worker: `async with`, run(), shutdown(); other
    attributes are the shared queue's worker's."""

    def __init__(
        self,
        shared: Worker,
        own: Worker | None = None,
        browsers: BrowserSessions | None = None,
        mcp: McpPool | None = None,
        tracing: Tracing | None = None,
        run_sandboxes: RunSandboxes | None = None,
    ) -> None:
        self.shared, self.own, self.browsers, self.mcp = shared, own, browsers, mcp
        self.tracing = tracing
        self.run_sandboxes = run_sandboxes
        self.contact = ServerContact(shared.client)
        self._watch: asyncio.Task | None = None
        self._stopped_once = False

    @property
    def workers(self) -> list[Worker]:
        return [self.shared] if self.own is None else [self.shared, self.own]

    def _start_watching(self) -> None:
        """Before the workers start: their activity tasks inherit the context.
        Once, whether the set is entered, run, or both."""
        watch_in_this_context(self.contact)
        if self._watch is None or self._watch.done():
            self._watch = asyncio.create_task(self.contact.watch())

    async def __aenter__(self) -> WorkerSet:
        self._start_watching()
        try:
            await self.shared.__aenter__()
        except BaseException:
            self._stop_watching()
            raise
        if self.own is not None:
            try:
                await self.own.__aenter__()
            except BaseException:
                await self.shared.__aexit__(None, None, None)
                self._stop_watching()
                raise
        return self

    def _stop_watching(self) -> None:
        if self._watch is not None:
            self._watch.cancel()

    async def __aexit__(self, exc_type: type[BaseException] | None, *rest: Any) -> None:
        try:
            await asyncio.gather(*(worker.__aexit__(exc_type, *rest) for worker in reversed(self.workers)))
        finally:
            await self._stopped()

    async def run(self) -> None:
        """Runs every worker until one stops; then the others stop too."""
        self._start_watching()
        tasks = [asyncio.create_task(worker.run()) for worker in self.workers]
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            if len(done) < len(tasks):
                await asyncio.gather(*(worker.shutdown() for worker in self.workers), return_exceptions=True)
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            await self._stopped()

    async def shutdown(self) -> None:
        await asyncio.gather(*(worker.shutdown() for worker in self.workers))

    async def _stopped(self) -> None:
        """The browsers, MCP servers and runs' tool sandboxes close after the
        activities that used them finished; the worker's spans are flushed last."""
        if self._stopped_once:
            return
        self._stopped_once = True
        self._stop_watching()
        if self.browsers is not None:
            await self.browsers.close_all()
        if self.mcp is not None:
            await self.mcp.close_all()
        if self.run_sandboxes is not None:
            await asyncio.to_thread(self.run_sandboxes.close_all)
        if self.tracing is not None:
            # Last: the spans of the activities that just ended are flushed too.
            await asyncio.to_thread(self.tracing.close)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.shared, name)
