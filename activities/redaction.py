"""Keeping the worker's secrets out of everything its activities hand back.

An activity's result and error go into the run's history, from there to the
model and to the terminal. A provider that echoes the API key in a 401, or
tool code that prints a key it found, would put the key there; every string
leaving an activity is therefore redacted on its way out, by a worker-wide
interceptor, whichever activity it came from.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterable
from typing import Any

from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.exceptions import CancelledError as TemporalCancelledError
from temporalio.worker import ActivityInboundInterceptor, ExecuteActivityInput, Interceptor

from agent_model.payload import clip, map_texts
from config.settings import Settings

REDACTED = "[REDACTED]"
MIN_SECRET_LENGTH = 8
"""Shorter values are not redacted: they would match ordinary text."""
ERROR_MESSAGE_LIMIT = 4000
"""Characters of an activity's error message (cut after redaction, so that
no part of a secret is left behind by the cut)."""


class Redactor:
    """Replaces each secret in a text by REDACTED."""

    def __init__(self, secrets: Iterable[str | None]) -> None:
        # Longest first: a secret that contains another is replaced whole.
        self.secrets = sorted({s for s in secrets if s and len(s) >= MIN_SECRET_LENGTH}, key=len, reverse=True)

    def text(self, text: str) -> str:
        for secret in self.secrets:
            if secret in text:
                text = text.replace(secret, REDACTED)
        return text

    def value(self, value: Any) -> Any:
        """`value` with every string in it redacted (models, lists, dicts)."""
        return map_texts(value, self.text) if self.secrets else value

    def error(self, error: Exception) -> ApplicationError:
        """An ApplicationError that says what `error` says, redacted, and
        retries as it would have (same type, non_retryable, retry delay)."""
        text = error.message if isinstance(error, ApplicationError) else str(error)
        message = clip(self.text(text), ERROR_MESSAGE_LIMIT)
        if not isinstance(error, ApplicationError):
            return ApplicationError(message, type=error.__class__.__name__)
        return ApplicationError(
            message,
            *self.value(list(error.details)),
            type=error.type,
            non_retryable=error.non_retryable,
            next_retry_delay=error.next_retry_delay,
            category=error.category,
        )


MIN_MCP_SECRET = 12


def worker_secrets(settings: Settings, client: Client | None = None) -> list[str]:
    """The keys the worker holds: every LLM profile's, the search engines'
    ([search] brave_api_key, tavily_api_key), and Temporal's."""
    keys = [llm.api_key.get_secret_value() for llm in settings.llm.values() if llm.api_key is not None]
    keys += [key.get_secret_value() for key in (settings.search.brave_api_key, settings.search.tavily_api_key) if key is not None]
    # What mcp.json hands its servers (env, headers) may be keys too; short
    # values (a port, "true") would only blur outputs, so they are left out.
    for server in settings.mcp_servers.values():
        keys += [value for value in (*server.env.values(), *server.headers.values()) if len(value) >= MIN_MCP_SECRET]
    keys.append(os.environ.get("TEMPORAL_API_KEY", ""))
    if client is not None and client.api_key:
        keys.append(client.api_key)
    return [k for k in keys if k]


class RedactingInterceptor(Interceptor):
    """Redacts the result and the error of every activity of the worker."""

    def __init__(self, redactor: Redactor) -> None:
        self.redactor = redactor

    @classmethod
    def for_worker(cls, settings: Settings, client: Client) -> RedactingInterceptor:
        return cls(Redactor(worker_secrets(settings, client)))

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _RedactingActivityInbound(next, self.redactor)


class _RedactingActivityInbound(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, redactor: Redactor) -> None:
        super().__init__(next)
        self.redactor = redactor

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        try:
            result = await super().execute_activity(input)
        except (asyncio.CancelledError, TemporalCancelledError):
            raise
        except Exception as e:
            # from None: the original, unredacted, would travel along as the cause.
            raise self.redactor.error(e) from None
        return self.redactor.value(result)
