"""The workflow side of sessions (agent_model/session.py): the `send_message`
update and `session` query, the wait for the next message between turns, and
the state a closed run hands to the execution that goes on with it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from agent_model.continuation import carried_state, limits_of_older_inputs
    from agent_model.messages import user_message
    from agent_model.payload import clip
    from agent_model.run import NOTE_LIMIT, AgentRunInput
    from agent_model.run_state import RunState
    from agent_model.session import (
        SessionMessage, SessionTerms, SessionView, accept, begin_turn, end_turn, goes_on, idle_note, idle_text, refusal,
    )
    from agent_model.state import AgentState, StopReason
    from workflows.run_ending import RunEnded

Ending = tuple[AgentState, StopReason, str | None]
DETAILS_MESSAGE_SHOWN = 200
"""Characters of the turn's message in the Web UI details."""


class Turns:
    """Where a session's run is between its turns; inert for a run that is no session."""

    def __init__(self, state: RunState, terms: SessionTerms | None, publish: Callable[[], None]) -> None:
        self.state, self.terms, self.publish = state, terms, publish

    @property
    def active(self) -> bool:
        return self.terms is not None and self.state.session is not None

    def steps_before_turn(self) -> int:
        """Steps of the earlier turns: each turn gets the profile's max_steps."""
        session = self.state.session
        current = session.current if self.active and session is not None else None
        return current.first_step - 1 if current is not None else 0

    def between_turns(self) -> bool:
        return self.active and self.state.session is not None and self.state.session.idle

    def goes_on(self, ending: Ending, answer: Callable[[], str | None]) -> bool:
        """After a turn that ended with `ending`: record it and say whether
        the run waits for another message (else it ends with this ending)."""
        state, session = self.state, self.state.session
        if not self.active or session is None or session.closing or state.profile is None or not goes_on(ending[0]):
            if session is not None:
                session.closing = True  # a message sent while the run ends is refused, not left unread
            return False
        agent_state, reason, note = ending
        note = clip(note, NOTE_LIMIT) if note else note
        end_turn(session, state.step, agent_state, reason, answer(), note)
        if note and state.records and state.records[-1].step > self.steps_before_turn():
            state.records[-1].note = note
        state.note = note
        return True

    async def next_message(self) -> None:
        """Wait (idle) for the next message and begin its turn; no message
        within the idle time raises RunEnded: the run ends with the last
        turn's outcome and a note saying how to come back."""
        state, session, terms = self.state, self.state.session, self.terms
        assert session is not None and terms is not None
        session.idle = True
        state.agent_state = AgentState.IDLE
        self.publish()
        if not session.inbox:
            try:
                await workflow.wait_condition(lambda: bool(session.inbox), timeout=timedelta(seconds=terms.idle_seconds))
            except asyncio.TimeoutError:
                pass  # a message that came with the timeout is still taken below
        if not session.inbox:
            session.closing = True
            last = session.current
            reason = last.stop_reason if last is not None and last.stop_reason else StopReason.TERMINATED
            outcome = last.state if last is not None and last.state else AgentState.FINISHED
            raise RunEnded(reason, idle_note(terms.idle_seconds, workflow.info().workflow_id, last.note if last else None), outcome)
        text = begin_turn(session, state.step)
        state.memory.add(user_message(text))
        state.final_answer, state.note = None, None
        state.agent_state = AgentState.RUNNING

    def details(self) -> list[str]:
        """Markdown lines for the Web UI details."""
        session, terms = self.state.session, self.terms
        if not self.active or session is None or terms is None:
            return []
        current = session.current
        message = " ".join((current.message if current else "").split())
        lines = [f"**turn {session.turn}**: {clip(message, DETAILS_MESSAGE_SHOWN)}"]
        if session.idle and not session.closing:
            lines.append(
                f"**waiting for a message** (the session ends after {idle_text(terms.idle_seconds)} idle): send the "
                'update `send_message` with {"text": "..."}'
            )
        if session.inbox:
            lines.append(f"**queued** {len(session.inbox)} message(s)")
        return lines


class SessionHandlers:
    """The session's update and queries, read by a closed run's replay too."""

    input: AgentRunInput
    state: RunState

    @workflow.update
    async def send_message(self, message: SessionMessage) -> str:
        """A follow-up: it starts the next turn at once when the run is idle,
        or waits in the inbox until the working turn has ended (queued)."""
        assert self.state.session is not None  # the validator refused it otherwise
        return accept(self.state.session, message.text)

    @send_message.validator
    def _validate_message(self, message: SessionMessage) -> None:
        why = refusal(self.state.session, self.input.session, message.text, workflow.info().workflow_id)
        if why is not None:
            raise ValueError(why)

    @workflow.query
    def session(self) -> SessionView | None:
        session, terms = self.state.session, self.input.session
        if session is None or terms is None:
            return None
        return SessionView(
            turn=session.turn, idle=session.idle, closing=session.closing, queued=len(session.inbox),
            idle_seconds=terms.idle_seconds, turns=session.turns,
        )

    @workflow.query
    def state_to_carry(self) -> RunState:
        """The state an execution that goes on with this (closed) run starts
        from, bounded as continue-as-new bounds it."""
        limits = self.input.continuation or limits_of_older_inputs()
        return carried_state(self.state, workflow.info().run_id, limits)
