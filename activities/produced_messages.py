"""Writing the messages activities produce to the shared context store.

A think's reply and a tool's observation reach the workflow as the activity's
result, so they are in the run's history once already. If the next think
carried them again, every observation would be in history twice. Instead the
worker that produced one writes it to the shared store (activities/
context_store.py) and returns the digest it wrote; the workflow checks that
digest against the message it adds to memory and the next think names the
message instead of carrying it (agent_model/think_context.py).

This is a worker-wide activity interceptor placed outside the redacting one:
it sees, and stores, exactly what goes into history, never a secret that the
redaction removed.
"""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio import activity
from temporalio.worker import ActivityInboundInterceptor, ExecuteActivityInput, Interceptor

from activities.context_store import ContextStore
from agent_model.browser import TOOL_NAME, BrowserRequest, BrowserResult
from agent_model.llm_io import ThinkResponse
from agent_model.mcp import McpCallRequest, McpCallResult
from agent_model.messages import Message
from agent_model.think_context import MESSAGE_DIGEST_CHARS, message_bytes
from agent_model.tool_io import ToolRequest, ToolResult, observation_message, observation_text


def produced_message(request: Any, result: Any) -> Message | None:
    """The memory message an activity's result becomes, if the workflow will add one."""
    if isinstance(result, ThinkResponse):
        return result.message
    if (
        isinstance(result, McpCallResult)
        and isinstance(request, McpCallRequest)
        and request.call_id is not None
        and request.observe_limit is not None
        and request.function_name is not None
    ):
        return observation_message(observation_text(result), request.call_id, request.function_name, request.observe_limit)
    if isinstance(result, BrowserResult) and isinstance(request, BrowserRequest) and request.call_id is not None:
        # Used only when the workflow's observation is the output as it is
        # (no restore note, no extraction): the digests must match.
        return observation_message(result.output, request.call_id, TOOL_NAME, request.observe_limit)
    if (
        isinstance(result, ToolResult)
        and isinstance(request, ToolRequest)
        and request.call_id is not None
        and request.observe_limit is not None
    ):
        return observation_message(
            observation_text(result), request.call_id, activity.info().activity_type, request.observe_limit
        )
    return None


class ProducedMessagesInterceptor(Interceptor):
    def __init__(self, store: ContextStore) -> None:
        self.store = store

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _StoringActivityInbound(next, self.store)


class _StoringActivityInbound(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, store: ContextStore) -> None:
        super().__init__(next)
        self.store = store

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        result = await super().execute_activity(input)
        message = produced_message(input.args[0] if input.args else None, result)
        if message is not None:
            try:
                result.stored_digest = await asyncio.to_thread(
                    self.store.put, message_bytes(message), MESSAGE_DIGEST_CHARS
                )
            except OSError as e:
                # The next think then carries the message itself, as it would without a store.
                activity.logger.warning("cannot write the produced message to the shared store: %s", e)
        return result
