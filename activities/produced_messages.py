"""Finishing the messages activities produce, and writing them to the shared
context store.

A think's reply and a tool's observation reach the workflow as the activity's
result, so they are in the run's history once already. If the next think
carried them again, every observation would be in history twice. Instead the
worker that produced one finishes the memory message here (a tool's
observation: the tool message, cut to the call's observe_limit), writes it to
the shared store (activities/context_store.py) and returns it with the digest
it wrote. The workflow adds exactly that message to memory, so the next think
names it instead of carrying it (agent_model/think_context.py): nothing on
either side has to rebuild the other's text. What the workflow adds of its own
(a note that a session was restored) is a message of its own.

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
from agent_model.tool_io import ProducedObservation, ToolRequest, ToolResult, observation_message, observation_text


def finished_observation(request: Any, result: Any) -> Message | None:
    """The observation message of a tool call whose request named the call."""
    if isinstance(result, McpCallResult) and isinstance(request, McpCallRequest):
        if request.call_id is None or request.observe_limit is None or request.function_name is None:
            return None
        return observation_message(observation_text(result), request.call_id, request.function_name, request.observe_limit)
    if isinstance(result, BrowserResult) and isinstance(request, BrowserRequest):
        if request.call_id is None:
            return None
        return observation_message(result.output, request.call_id, TOOL_NAME, request.observe_limit)
    if isinstance(result, ToolResult) and isinstance(request, ToolRequest):
        if request.call_id is None or request.observe_limit is None:
            return None
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
        if isinstance(result, ThinkResponse):
            result.stored_digest = await self._stored(result.message)
        elif isinstance(result, ProducedObservation):
            message = finished_observation(input.args[0] if input.args else None, result)
            if message is not None:
                # The text travels once, in the message memory takes.
                result.message, result.output = message, ""
                result.stored_digest = await self._stored(message)
        return result

    async def _stored(self, message: Message) -> str | None:
        try:
            return await asyncio.to_thread(self.store.put, message_bytes(message), MESSAGE_DIGEST_CHARS)
        except OSError as e:
            # The next think then carries the message itself, as it would without a store.
            activity.logger.warning("cannot write the produced message to the shared store: %s", e)
            return None
