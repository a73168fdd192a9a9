"""The think activity: one Chat Completions call for a run's next step.

It completes the request from the context caches, attaches the newest
screenshot (activities/llm_images.py), counts the prompt's tokens against the
profile's limit, calls the model (activities/llm_client.py says what each
failure becomes) and reads the reply, heartbeating all the while. With a live
feed the call streams (activities/llm_stream.py) and its tokens go to the
run's journal as they arrive (activities/live_feed.py); the result is the
same completion either way.
"""

from __future__ import annotations

import asyncio
import functools
import json
import re
import time
from typing import Any

from openai import AsyncOpenAI
from openai.types.chat import ChatCompletion
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.context_store import ContextStore
from activities.heartbeats import heartbeating
from activities.live_feed import LiveFeed
from activities.llm_client import MAX_REPLY_BYTES, complete, make_client, reply_too_large
from activities.llm_images import Attachment, as_counted, attach_images, wire_message
from activities.llm_stream import StreamingRefused, complete_streaming
from activities.lost_worker import release_run_from_lost_worker
from activities.reply_reading import response_of, unreadable_reply, usage_of
from activities.think_context_cache import Resolved, ThinkContextCache
from activities.token_count import count_prompt_tokens, encoding_for
from activities.workspace import Workspace
from agent_model.activity_specs import THINK_CONFIG
from agent_model.errors import LLM_EMPTY_RESPONSE_ERROR, TOKEN_LIMIT_ERROR, UNKNOWN_LLM_PROFILE_ERROR
from agent_model.llm_io import ThinkRequest, ThinkResponse
from agent_model.messages import Message
from agent_model.payload import json_size
from agent_model.think_context import MESSAGE_DIGEST_CHARS, ContextSync, canonical, message_bytes
from agent_model.usage import TokenUsage
from config.settings import LLMSettings

ABANDON_WAIT = 1.0
"""Seconds a cancelled think waits for its HTTP call to unwind (closing the
connection) before it reports the cancellation."""
REASONING_MODEL = re.compile(r"(o[1-9]|gpt-5(\.\d+)?)(-.*)?")
"""OpenAI's reasoning models (o1, o3-mini, o4-mini-2025-04-16, gpt-5, gpt-5.1,
gpt-5-mini, ...): they refuse max_tokens and any temperature but the default."""
CHAT_VARIANT = re.compile(r"gpt-5(\.\d+)?-chat(-.*)?")
"""gpt-5-chat-latest and the like: GPT-5's non-reasoning variants."""
VISION_LLM = "vision"
"""The LLM profile (`[llm.vision]`) that answers calls with an image attached,
when the worker has one."""

THINK_OPTIONS = THINK_CONFIG
"""Options for workflow.execute_activity("think", ...); each bound's reason is in
agent_model/activity_specs.py."""


@functools.cache  # asked on every think; a profile's model does not change
def is_reasoning_model(model: str) -> bool:
    # Gateways name models with a provider in front: openai/o3-mini.
    name = model.rsplit("/", 1)[-1].lower()
    return REASONING_MODEL.fullmatch(name) is not None and CHAT_VARIANT.fullmatch(name) is None


def request_params(
    settings: LLMSettings, request: ThinkRequest, parts: Resolved, shown: dict[int, Attachment] | None = None
) -> dict[str, Any]:
    """The Chat Completions body; `parts` is the request as the context cache
    resolved it, `shown` what stands for its messages' image files."""
    shown = shown or {}
    messages = [wire_message(m, shown.get(i)) for i, m in enumerate(parts.messages)]
    if parts.system_prompt:
        messages.insert(0, {"role": "system", "content": parts.system_prompt})
    params: dict[str, Any] = {"model": settings.model, "messages": messages, "stream": False}
    if is_reasoning_model(settings.model):
        params["max_completion_tokens"] = settings.max_tokens
    else:
        params["max_tokens"] = settings.max_tokens
        params["temperature"] = settings.temperature
    if parts.tools:
        params["tools"] = parts.tools
        params["tool_choice"] = request.tool_choice.value
    return params


def check_reply_size(message: Message) -> None:
    size = json_size(message)
    if size > MAX_REPLY_BYTES:
        raise reply_too_large(f"the reply has {size} bytes of content and tool calls, over the limit of {MAX_REPLY_BYTES}")


def record_call(llm: str, model: str, seconds: float, usage: TokenUsage) -> None:
    """The worker's metrics of one answered LLM call (worker.py --metrics)."""
    meter = activity.metric_meter().with_additional_attributes({"llm": llm, "model": model})
    meter.create_histogram("durable_manus_think_llm_ms", "Milliseconds the model took to answer a think", "ms").record(
        round(seconds * 1000)
    )
    meter.create_counter("durable_manus_prompt_tokens", "Prompt tokens the model reported").add(usage.prompt_tokens)
    meter.create_counter("durable_manus_completion_tokens", "Completion tokens the model reported").add(
        usage.completion_tokens
    )


def estimated_usage(completion: ChatCompletion, body: dict[str, Any], model: str) -> ChatCompletion:
    """`completion` with usage counted by tiktoken: what the prompt and the
    reply would cost, for a stream that did not say."""
    encoding = encoding_for(model)

    def tokens(value: Any) -> int:
        return len(encoding.encode(value if isinstance(value, str) else json.dumps(value), disallowed_special=()))

    prompt = tokens(body.get("messages", [])) + (tokens(body["tools"]) if body.get("tools") else 0)
    reply = 0
    for choice in completion.choices or []:
        message = getattr(choice, "message", None)
        reply += tokens(getattr(message, "content", None) or "")
        for call in getattr(message, "tool_calls", None) or []:
            function = getattr(call, "function", None)
            reply += tokens(getattr(function, "name", "") or "") + tokens(getattr(function, "arguments", "") or "")
    completion.usage = {"prompt_tokens": prompt, "completion_tokens": reply, "total_tokens": prompt + reply}  # type: ignore[assignment]
    return completion


def _fetch(store: ContextStore, lacking: list[tuple[str, str]]) -> dict[str, Any]:
    """What the store holds of `lacking`, parsed; the store has verified each blob's digest."""
    found: dict[str, Any] = {}
    for kind, name in lacking:
        data = store.get(name)
        if data is None:
            break  # the think cannot be completed: the workflow resends the window
        try:
            if kind == "message":
                found[name] = Message.model_validate_json(data)
            elif kind == "system":
                found[name] = data.decode()
            else:
                found[name] = json.loads(data)
        except ValueError:
            break
    return found


def _save(store: ContextStore, request: ThinkRequest) -> None:
    """Writes what the request carried, so any worker can serve the run's next think."""
    for message in request.messages:
        store.put(message_bytes(message), MESSAGE_DIGEST_CHARS)
    if request.system_prompt is not None:
        store.put(canonical(request.system_prompt), 32)
    if request.tools is not None:
        store.put(canonical(request.tools), 32)


class LLMActivities:
    """Holds the worker's LLM settings (and keys), one client per LLM profile,
    and the runs' cached context windows."""

    def __init__(
        self,
        llm_profiles: dict[str, LLMSettings],
        context_store: ContextStore | None = None,
        workspace: Workspace | None = None,
        live: LiveFeed | None = None,
    ) -> None:
        self._profiles = llm_profiles
        self._clients: dict[str, AsyncOpenAI] = {}
        self.context_cache = ThinkContextCache()
        self.context_store = context_store
        self.workspace = workspace
        """Where the runs' image files are; None: they are never sent."""
        self.live = live
        """Where streamed thinks are written; None: thinks do not stream."""
        self.plain: set[str] = set()
        """LLM profiles whose endpoint refused to stream, or streamed without
        the usage that budgets need: their thinks are plain calls from then on."""

    async def _resolve(self, request: ThinkRequest) -> Resolved:
        """The complete request: from the request, this worker's cache, and
        what the shared store holds; the new parts are then written to the store."""
        meter = activity.metric_meter()
        fetched: dict[str, Any] = {}
        lacking = self.context_cache.lacking(request) if request.context is not None else []
        if lacking and self.context_store is not None:
            started = time.monotonic()
            # Twice: another think may evict this run's cached window while the first fetch runs.
            for _ in range(2):
                wanted = [(kind, name) for kind, name in self.context_cache.lacking(request) if name not in fetched]
                if not wanted or not all(name for _, name in wanted):
                    break
                found = await asyncio.to_thread(_fetch, self.context_store, wanted)
                fetched.update(found)
                if len(found) < len(wanted):
                    break  # the store lacks it too
            meter.create_histogram(
                "think_context_fetch_ms", "Time to fetch a think's missing context from the shared store", "ms"
            ).record(round((time.monotonic() - started) * 1000))
        try:
            parts = self.context_cache.resolve(request, fetched)
        except ApplicationError:
            meter.create_counter(
                "think_context_misses", "Thinks whose context neither the worker nor the shared store held"
            ).add(1)
            raise
        if request.context is not None:
            if lacking:
                meter.create_counter(
                    "think_context_store_fetches", "Thinks completed from the shared context store"
                ).add(1)
            elif not ContextSync.is_complete(request):
                meter.create_counter(
                    "think_context_hits", "Thinks whose context the worker held in memory"
                ).add(1)
            if self.context_store is not None:
                try:
                    await asyncio.to_thread(_save, self.context_store, request)
                except OSError as e:
                    # Only other workers' next thinks depend on it, and they fall back to a resend.
                    activity.logger.warning("cannot write the think's context to the shared store: %s", e)
        return parts

    def _client(self, name: str) -> AsyncOpenAI:
        if name not in self._clients:
            self._clients[name] = make_client(self._profiles[name])
        return self._clients[name]

    async def _call(
        self, name: str, settings: LLMSettings, body: dict[str, Any], where: str, request: ThinkRequest
    ) -> ChatCompletion:
        """The model's completion: streamed into the run's journal when the
        worker has a live feed and the endpoint streams, else one plain call."""
        client = self._client(name)
        run_id = activity.info().workflow_id if activity.in_activity() else None
        if self.live is None or name in self.plain or run_id is None:
            return await complete(client, body, settings.model, where)
        try:
            async with self.live.journal(run_id, request.step, request.workspace) as journal:
                answer = await complete_streaming(client, body, settings.model, where, journal.add)
        except StreamingRefused as e:
            self.plain.add(name)
            activity.logger.info("LLM profile %r does not stream (%s); its thinks are plain calls from now on", name, e)
            return await complete(client, body, settings.model, where)
        if answer.streamed and not answer.usage_reported:
            # Budgets and the step's tokens need the usage: plain calls report it.
            self.plain.add(name)
            activity.logger.info("LLM profile %r streams without usage; its thinks are plain calls from now on", name)
            return estimated_usage(answer.completion, body, settings.model)
        return answer.completion

    @activity.defn(name="think")
    async def think(self, request: ThinkRequest) -> ThinkResponse:
        # Heartbeats cover the whole attempt, not only the wait for the model:
        # fetching a window from the shared store may take a while too.
        work = asyncio.ensure_future(self._answer(request))
        try:
            async with heartbeating():
                await asyncio.wait({work})
            return work.result()
        finally:
            if not work.done():  # cancelled while waiting: abandon the model's call
                work.cancel()
                # The endpoint sees the connection close before the run hears that
                # the think is over.
                await asyncio.wait({work}, timeout=ABANDON_WAIT)

    async def _answer(self, request: ThinkRequest) -> ThinkResponse:
        await release_run_from_lost_worker()
        if request.llm not in self._profiles:
            raise ApplicationError(
                f"the worker has no LLM profile {request.llm!r}", type=UNKNOWN_LLM_PROFILE_ERROR, non_retryable=True
            )
        parts = await self._resolve(request)
        shown: dict[int, Attachment] = {}
        if any(m.image_file for m in parts.messages):
            shown = await asyncio.to_thread(attach_images, parts.messages, self.workspace, request.workspace)
        with_image = any(a.url is not None for a in shown.values())
        name = VISION_LLM if with_image and VISION_LLM in self._profiles else request.llm
        settings = self._profiles[name]
        if settings.max_input_tokens is not None:
            counted = [as_counted(m, shown[i]) if i in shown else m for i, m in enumerate(parts.messages)]
            needed = count_prompt_tokens(settings.model, counted, parts.system_prompt, parts.tools)
            if needed > settings.max_input_tokens:
                raise ApplicationError(
                    f"request needs {needed} input tokens, over the limit of {settings.max_input_tokens}",
                    needed,
                    settings.max_input_tokens,
                    type=TOKEN_LIMIT_ERROR,
                    non_retryable=True,
                )

        # The parameters are already in wire format: posting them directly skips
        # chat.completions.create's walk over every message and tool schema,
        # ~20 ms of CPU per call with a full memory window (BENCHMARKS.md, P1).
        body = request_params(settings, request, parts, shown)
        asked = time.monotonic()
        where = f"at {settings.endpoint} (attempt {activity.info().attempt if activity.in_activity() else 1})"
        completion = await self._call(name, settings, body, where, request)

        choices = completion.choices
        if not choices:
            raise ApplicationError("LLM answered with no choices", type=LLM_EMPTY_RESPONSE_ERROR)
        # The call is paid for: from here on a reply that cannot be read is a
        # note for the model, never a failed attempt that Temporal would retry.
        usage = usage_of(completion)
        record_call(name, settings.model, time.monotonic() - asked, usage)
        try:
            first = choices[0] if isinstance(choices, list) else None
            response = response_of(completion, first, parts.messages, settings.model)
            check_reply_size(response.message)
        except ApplicationError:
            raise  # a reply too large: refused on purpose
        except Exception as e:  # noqa: BLE001 (whatever the reply held)
            activity.logger.warning("the model's reply could not be read: %s: %s", type(e).__name__, e)
            return unreadable_reply(e, usage, settings.model, parts.messages)
        return response
