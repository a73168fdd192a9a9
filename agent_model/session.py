"""Multi-turn sessions: a run that, at the end of a turn, waits for the next
message instead of ending (docs/sessions.md).

A run is a session when its input carries SessionTerms (`chat` starts such
runs; `run` does not, so every other run ends as it always did). A turn is the
steps from one message to the point where the run would have ended: the model
terminated or answered, gave up, hit the turn's max_steps, ... Then the run is
idle: it waits up to `idle_seconds` for a message in its inbox; one arrives and
becomes a user message in memory and the next turn; none does and the run ends
with the last turn's result and a note saying how to come back.

A run that ended (a session that went idle too long, or any run of `run`) takes
a follow-up too: the starter starts a new execution of the same workflow id
from the closed run's state (`reopened`), so it stays one conversation.

Everything here is pure: the workflow side is workflows/agent_session.py.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from agent_model.payload import clip
from agent_model.state import AgentState, StopReason

DEFAULT_IDLE_SECONDS = 30 * 60.0
MESSAGE_LIMIT = 32_000
"""Characters of one follow-up message; a longer one is refused, not cut (the
user should know the agent did not read all of it)."""
QUEUE_LIMIT = 4
"""Messages that may wait while a turn works; more are refused."""
TURNS_KEPT = 50
"""Turns whose message and outcome the run keeps (for show and the Web UI);
older ones stay in the histories of the executions that had them."""
MESSAGE_SHOWN = 500
"""Characters of a turn's message kept in its TurnRecord."""
ANSWER_SHOWN = 4000
"""Characters of a turn's answer kept in its TurnRecord."""


class SessionTerms(BaseModel):
    """A session's terms, resolved by the starter from config and kept in the
    run's input (every continued execution has the same)."""

    idle_seconds: float = Field(DEFAULT_IDLE_SECONDS, gt=0)
    """How long the run waits for a message after a turn before it ends."""
    max_queued: int = Field(QUEUE_LIMIT, ge=1)
    """Messages that may wait while a turn works."""
    message_limit: int = Field(MESSAGE_LIMIT, ge=1)
    """Characters of one message."""


class TurnRecord(BaseModel):
    """One turn: the message that began it and how it ended (once it has)."""

    turn: int
    message: str
    """The message (turn 1: the task), cut to MESSAGE_SHOWN characters."""
    first_step: int
    """The first step of the turn (steps count on across turns)."""
    last_step: int | None = None
    state: AgentState | None = None
    stop_reason: StopReason | None = None
    answer: str | None = None
    note: str | None = None

    @property
    def ended(self) -> bool:
        return self.stop_reason is not None


class SessionState(BaseModel):
    """What a session adds to the run's state (RunState.session)."""

    turn: int = 1
    """The turn working, or the last one when the run is idle."""
    idle: bool = False
    """True between the end of a turn and the next message."""
    closing: bool = False
    """True once the run decided to end: no message is taken any more."""
    inbox: list[str] = Field(default_factory=list)
    """Messages not yet taken, oldest first."""
    turns: list[TurnRecord] = Field(default_factory=list)
    """The newest TURNS_KEPT turns."""

    @property
    def current(self) -> TurnRecord | None:
        return self.turns[-1] if self.turns else None


def first_session(task: str) -> SessionState:
    """The session of a new run: turn 1 is its task."""
    return SessionState(turns=[TurnRecord(turn=1, message=clip(task, MESSAGE_SHOWN), first_step=1)])


def refusal(session: SessionState | None, terms: SessionTerms | None, text: str, run_id: str) -> str | None:
    """Why the run cannot take `text` now (None: it can); one line each."""
    if terms is None or session is None:
        return (
            f"run {run_id} was not started as a session; once it has ended, "
            f'`python starter.py chat {run_id} "..."` goes on with it'
        )
    if session.closing:
        return f"run {run_id} is ending; a follow-up goes on with it in a new execution"
    if not text.strip():
        return "the message is empty"
    if len(text) > terms.message_limit:
        return f"the message has {len(text)} characters, over the limit of {terms.message_limit}; shorten it"
    if not session.idle and len(session.inbox) >= terms.max_queued:
        return f"{len(session.inbox)} messages already wait for the working turn to end; send this one later"
    return None


def accept(session: SessionState, text: str) -> str:
    """Put `text` in the inbox (refusal said it may); the reply to the sender."""
    session.inbox.append(text)
    turn = session.turn + len(session.inbox)
    if session.idle and len(session.inbox) == 1:
        return f"turn {turn} starts now"
    return f"queued: turn {turn} starts when turn {turn - 1} has ended"


def begin_turn(session: SessionState, step_now: int) -> str:
    """Take the oldest message: the next turn begins after step `step_now`."""
    text = session.inbox.pop(0)
    session.turn += 1
    session.idle = False
    session.turns = [
        *session.turns, TurnRecord(turn=session.turn, message=clip(text, MESSAGE_SHOWN), first_step=step_now + 1)
    ][-TURNS_KEPT:]
    return text


def end_turn(
    session: SessionState, step_now: int, state: AgentState, reason: StopReason, answer: str | None, note: str | None
) -> None:
    """The working turn ended after step `step_now`; the run goes idle."""
    turn = session.current
    if turn is None or turn.turn != session.turn:  # a state from before turns were kept
        turn = TurnRecord(turn=session.turn, message="", first_step=1)
        session.turns = [*session.turns, turn][-TURNS_KEPT:]
    turn.last_step, turn.state, turn.stop_reason = step_now, state, reason
    turn.answer = clip(answer, ANSWER_SHOWN) if answer else answer
    turn.note = note
    session.idle = True


def goes_on(agent_state: AgentState) -> bool:
    """Whether a session takes another turn after a turn that ended so. Every
    ending but a cancellation does: a turn that gave up, hit max_steps, its
    budget or an error can be followed by a message that helps (a budget-ended
    turn's next turn ends at once unless its ceiling was raised)."""
    return agent_state != AgentState.CANCELLED


def idle_text(seconds: float) -> str:
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{seconds / 3600:g} h"
    if seconds >= 60:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"


def idle_note(seconds: float, run_id: str, earlier: str | None) -> str:
    """The note of a session that ended because no message came."""
    ended = f'the session was idle for {idle_text(seconds)} and ended; go on with: python starter.py chat {run_id} "..."'
    return f"{earlier}\n{ended}" if earlier else ended


def reopened(
    session: SessionState | None, task: str, step_now: int, outcome: tuple[AgentState, StopReason, str | None],
    message: str,
) -> SessionState:
    """The session of a closed run taking a follow-up: its turns so far (a run
    that was no session had one, its task, which ended with `outcome`: state,
    reason, answer), idle, `message` in the inbox."""
    if session is None:
        session = first_session(task)
        end_turn(session, step_now, *outcome, None)
    return session.model_copy(update={"idle": True, "closing": False, "inbox": [message]})


class SessionView(BaseModel):
    """What the `session` query answers: where the conversation is."""

    turn: int
    idle: bool
    closing: bool
    queued: int
    idle_seconds: float
    turns: list[TurnRecord]


class SessionMessage(BaseModel):
    """The argument of the `send_message` update: {"text": "..."}."""

    text: str
