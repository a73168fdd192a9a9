"""The OpenAI client of the think activity, and what each of its failures becomes.

Temporal owns retries (the SDK's are off), so this module's job is to classify
each failure as worth retrying or not, and to say so in the ApplicationError
(agent_model/errors.py names the types). The reply's body is read here, up to
a bound, so that a huge reply never reaches the worker's memory whole.
"""

from __future__ import annotations

import json
import math
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

import httpx2
import openai
from openai._constants import RAW_RESPONSE_HEADER
from openai.types.chat import ChatCompletion
from temporalio.exceptions import ApplicationError

from agent_model.activity_specs import MAX_THINK_RETRY_SECONDS
from agent_model.errors import (
    LLM_CONNECTION_ERROR,
    LLM_ERROR,
    LLM_INVALID_RESPONSE_ERROR,
    LLM_REQUEST_REJECTED_ERROR,
    LLM_TIMEOUT_ERROR,
    LLM_UNAVAILABLE_ERROR,
    REPLY_TOO_LARGE_ERROR,
)
from config.settings import LLMSettings

KEY_PLACEHOLDER = "no-key"
"""Sent to a server that needs no key (KEYLESS_API_TYPES) when none is set:
the SDK will not make a client without one."""
RETRYABLE_STATUS = {408, 409, 429}
"""Plus every 5xx: timeouts, conflicts, rate limits and server errors pass."""
MAX_RETRY_INTERVAL = timedelta(seconds=MAX_THINK_RETRY_SECONDS)
"""The longest Retry-After honoured: the retry policy's own longest interval."""
CHAT_COMPLETIONS_PATH = "/chat/completions"
"""Relative to base_url; the Azure client maps it to its deployment URL."""
MAX_REPLY_BYTES = 512 * 1024
"""Largest reply (its content and tool calls, as JSON) a think returns: the
reply is written into the run's history and result, which Temporal refuses
over 2 MiB."""
MAX_BODY_BYTES = 4 * MAX_REPLY_BYTES
"""Largest HTTP body read: the body of any reply within MAX_REPLY_BYTES is
smaller, since JSON escapes (\\u00e9) at most triple a character's size."""


def azure_address(base_url: str) -> dict[str, Any]:
    """How AsyncAzureOpenAI is told where to send requests. A base_url with a
    path (OpenManus's `<endpoint>/openai/deployments/<id>`, or `<endpoint>/openai`)
    is the client's base URL as is, as OpenManus passes it; a bare `<endpoint>`
    is the resource endpoint. Without /deployments in the path the SDK adds
    /deployments/<model>, so the model names the deployment."""
    if urlsplit(base_url).path.strip("/"):
        return {"base_url": base_url}
    return {"azure_endpoint": base_url}


def make_client(settings: LLMSettings) -> openai.AsyncOpenAI:
    key = settings.api_key.get_secret_value() if settings.api_key else None
    if not key and not settings.needs_key:
        key = KEY_PLACEHOLDER
    common: dict[str, Any] = {"api_key": key, "max_retries": 0, "timeout": settings.request_timeout}
    if settings.api_type == "azure":
        return openai.AsyncAzureOpenAI(api_version=settings.api_version, **azure_address(settings.base_url), **common)
    return openai.AsyncOpenAI(base_url=settings.base_url, **common)


def _header_number(error: openai.APIStatusError, name: str) -> float | None:
    try:
        value = float(error.response.headers.get(name, ""))
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None


def _retry_after(error: openai.APIStatusError) -> timedelta | None:
    """The wait the server asks for: retry-after-ms (OpenAI, Azure), else
    retry-after in seconds."""
    milliseconds = _header_number(error, "retry-after-ms")
    seconds = milliseconds / 1000 if milliseconds is not None else _header_number(error, "retry-after")
    if seconds is None:
        return None
    # Never wait longer than the retry policy's own longest interval.
    return timedelta(seconds=min(seconds, MAX_RETRY_INTERVAL.total_seconds()))


def _server_says_retry(error: openai.APIStatusError) -> bool | None:
    """The x-should-retry header: the server's own word on whether asking again may succeed."""
    value = error.response.headers.get("x-should-retry", "").strip().lower()
    return {"true": True, "false": False}.get(value)


def as_sdk_error(error: httpx2.TransportError) -> openai.OpenAIError:
    if isinstance(error, httpx2.TimeoutException):
        return openai.APITimeoutError(request=error.request)
    return openai.APIConnectionError(request=error.request)


def classify(error: Exception, model: str, where: str = "") -> ApplicationError:
    """The ApplicationError to raise for an SDK failure; `where`: the
    endpoint's host:port and the attempt, for the run's note and the follower
    (an unreachable endpoint is retried for a while: say which one)."""
    at = f" {where}" if where else ""
    if isinstance(error, openai.APITimeoutError):
        return ApplicationError(f"LLM call timed out ({model}){at}", type=LLM_TIMEOUT_ERROR)
    if isinstance(error, openai.APIConnectionError):
        return ApplicationError(f"cannot reach the LLM endpoint{at}: {error}", type=LLM_CONNECTION_ERROR)
    if isinstance(error, openai.APIStatusError):
        status = error.status_code
        message = f"LLM endpoint{at} answered {status}: {error.message}"
        retryable = status in RETRYABLE_STATUS or status >= 500
        verdict = _server_says_retry(error)
        if verdict is not None:
            retryable = verdict
        if retryable:
            return ApplicationError(
                message, type=LLM_UNAVAILABLE_ERROR, next_retry_delay=_retry_after(error)
            )
        if verdict is False:
            message += " (the endpoint says not to retry)"
        if status == 400 and "tool" in str(error.message).lower():
            message += f" (does model {model!r} support function calling?)"
        return ApplicationError(message, type=LLM_REQUEST_REJECTED_ERROR, non_retryable=True)
    return ApplicationError(f"LLM call failed: {error!r}", type=LLM_ERROR)


def reply_too_large(detail: str) -> ApplicationError:
    # Asking again costs as much and gets a reply as large.
    return ApplicationError(detail, type=REPLY_TOO_LARGE_ERROR, non_retryable=True)


async def read_body(response: httpx2.Response, limit: int = MAX_BODY_BYTES) -> bytes:
    """The response's body, refused (unread) when it declares or turns out to
    be over `limit` bytes."""
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise reply_too_large(f"the reply's body has {declared} bytes, over the limit of {limit}")
    chunks, size = [], 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > limit:
            raise reply_too_large(f"the reply's body is over the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def completion_from(body: bytes) -> ChatCompletion:
    try:
        data = json.loads(body)
    except ValueError:
        data = None
    if not isinstance(data, dict):
        raise ApplicationError("the LLM answered with a body that is not a JSON object", type=LLM_INVALID_RESPONSE_ERROR)
    return ChatCompletion.construct(**data)


async def complete(client: openai.AsyncOpenAI, body: dict[str, Any], model: str, where: str = "") -> ChatCompletion:
    """One Chat Completions call whose reply body is read only up to
    MAX_BODY_BYTES; a failure is raised as its ApplicationError (classify's `where`)."""
    try:
        # Typed as the cast_to, but with the header below it is the raw response.
        response: Any = await client.post(
            CHAT_COMPLETIONS_PATH,
            body=body,
            cast_to=ChatCompletion,
            # The SDK then hands back the response with its body still unread.
            options={"headers": {RAW_RESPONSE_HEADER: "stream"}},
        )
        try:
            return completion_from(await read_body(response.http_response))
        finally:
            await response.close()
    except openai.OpenAIError as e:
        raise classify(e, model, where) from None
    except httpx2.TransportError as e:  # while reading the body, outside the SDK
        raise classify(as_sdk_error(e), model, where) from None
