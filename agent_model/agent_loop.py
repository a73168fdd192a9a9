"""The agent loop's decisions, as plain Python: what a reply means, which calls
run, what memory gets after a step, when a stuck hint is due.

workflows/agent.py drives them with Temporal activities; bench/inproc.py drives
the same functions with the activities called directly; tests call them with
neither. A change here changes what AgentWorkflow does: guard it as
docs/deploying.md says.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from enum import Enum

from agent_model.llm_io import ThinkResponse
from agent_model.memory import Memory
from agent_model.messages import Message, Role, ToolCall, ToolChoice, is_empty_reply, user_message
from agent_model.plan import PlanBook
from agent_model.profiles import AgentProfile
from agent_model.prompting import fill
from agent_model.run import MAX_TOOL_CALLS_PER_REPLY, ToolCallRecord
from agent_model.stuck import is_stuck, reply_signature
from agent_model.tool_io import observation_message
from prompts import agent_notes

class ReplyKind(Enum):
    CONTENT_FILTERED = "content filtered: the run ends (asking again gets the same verdict)"
    EMPTY = "neither text nor a tool call"
    ACT = "tool calls to run"
    ANSWER = "a plain answer that ends the run"
    TOOL_REQUIRED = "a plain answer where a tool call was required: the model is reminded"
    GO_ON = "a plain answer; the loop goes on"


@dataclass(frozen=True)
class Reply:
    kind: ReplyKind
    message: Message
    """The reply as memory keeps it: at most MAX_TOOL_CALLS_PER_REPLY tool calls."""
    asked: int = 0
    """Tool calls the model asked for."""

    @property
    def dropped(self) -> int:
        return self.asked - len(self.message.tool_calls or [])


def read_reply(response: ThinkResponse, profile: AgentProfile) -> Reply:
    reply = response.message
    if response.finish_reason == "content_filter" and not reply.tool_calls:
        return Reply(ReplyKind.CONTENT_FILTERED, reply)
    if is_empty_reply(reply):
        return Reply(ReplyKind.EMPTY, reply)
    calls = reply.tool_calls or []
    asked = len(calls)
    if asked > MAX_TOOL_CALLS_PER_REPLY:
        reply = reply.model_copy(update={"tool_calls": calls[:MAX_TOOL_CALLS_PER_REPLY]})
    if asked:
        return Reply(ReplyKind.ACT, reply, asked)
    if profile.tool_choice == ToolChoice.REQUIRED:
        return Reply(ReplyKind.TOOL_REQUIRED, reply)
    if profile.tool_choice == ToolChoice.NONE or profile.finish_on_answer:
        return Reply(ReplyKind.ANSWER, reply)
    return Reply(ReplyKind.GO_ON, reply)


def dropped_calls_note(reply: Reply) -> str:
    return fill(agent_notes.TOO_MANY_CALLS_STEP_NOTE, dropped=reply.dropped, kept=MAX_TOOL_CALLS_PER_REPLY)


def dropped_calls_reminder(reply: Reply) -> Message:
    return user_message(fill(agent_notes.TOO_MANY_CALLS_REMINDER, asked=reply.asked, kept=MAX_TOOL_CALLS_PER_REPLY))


def next_step_message(
    profile: AgentProfile, directory: str, plans: PlanBook, tool_parts: Collection[str] = ()
) -> Message | None:
    """The prompt added before each think, if the profile has one, followed by
    what the run's stateful tools add (the browser's open page)."""
    if not profile.next_step_prompt:
        return None
    text = fill(profile.next_step_prompt, directory=directory, plan_status=plan_status(plans))
    return user_message("\n\n".join([text, *tool_parts]))


def system_prompt(profile: AgentProfile, directory: str, plans: PlanBook) -> str | None:
    return fill(profile.system_prompt, directory=directory, plan_status=plan_status(plans)) or None


def plan_status(plans: PlanBook) -> str:
    return plans.get(None).render() if plans.active else "No plan yet."


def over_the_per_reply_limit(profile: AgentProfile, index: int) -> str | None:
    """The observation of a call the profile does not let run, else None."""
    limit = profile.max_tool_calls_per_step
    if limit and index >= limit:
        return f"Error: only {limit} tool call(s) per reply; this one was not run."
    return None


def unknown_tool(profile: AgentProfile, name: str, known: Collection[str]) -> str | None:
    """The observation of a call no tool of this worker (`known`) answers, else None."""
    if name in profile.tools and name in known:
        return None
    available = ", ".join(tool for tool in profile.tools if tool in known)
    if name in profile.tools:  # the run began with it; a later deploy removed it
        return f"Error: this worker has no tool '{name}' any more; do without it. Available tools: {available}."
    return f"Error: unknown tool '{name}'. Available tools: {available}."


CUT_NOTE_ROOM = 100
"""Characters clip() may add after a text cut to its limit (the note saying so)."""


def is_observation_of(message: Message | None, call: ToolCall, limit: int) -> bool:
    """Whether an activity's finished message answers this call within its limit."""
    return (
        message is not None
        and message.role == Role.TOOL
        and message.tool_call_id == call.id
        and message.name == call.function.name
        and not message.tool_calls
        and message.base64_image is None
        and message.image_file is None
        and message.content is not None
        and len(message.content) <= limit + CUT_NOTE_ROOM
    )


def observed(
    call: ToolCall, observation: str, error: bool, limit: int, finished: Message | None = None
) -> tuple[Message, ToolCallRecord]:
    """A call's observation as memory keeps it (cut to `limit`), and its
    record: the activity's `finished` message as it is when it answers the call."""
    if finished is not None and is_observation_of(finished, call, limit):
        message = finished
    else:
        message = observation_message(observation, call.id, call.function.name, limit)
    record = ToolCallRecord(
        id=call.id,
        name=call.function.name,
        arguments=call.function.arguments,
        observation=message.content or "",
        error=error,
    )
    return message, record


def stuck_hint_due(memory: Memory, reply: Message, hinted: Collection[str], threshold: int) -> str | None:
    """The reply's signature when it repeats and has not had a hint yet."""
    signature = reply_signature(reply)
    if signature in hinted or not is_stuck(memory.messages, threshold):
        return None
    return signature
