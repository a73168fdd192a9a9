"""agent_model/session.py without a server: which messages a session takes,
how turns begin and end, and the state a closed run goes on from."""

from __future__ import annotations

from agent_model.session import (
    SessionTerms, accept, begin_turn, end_turn, first_session, goes_on, idle_note, refusal, reopened,
)
from agent_model.state import AgentState, StopReason

TERMS = SessionTerms(idle_seconds=90, max_queued=1, message_limit=10)


def test_a_session_refuses_what_it_cannot_take_in_one_line_each():
    session = first_session("the task")
    assert "was not started as a session" in refusal(None, None, "hi", "r1")
    assert refusal(session, TERMS, "  ", "r1") == "the message is empty"
    assert refusal(session, TERMS, "x" * 11, "r1") == "the message has 11 characters, over the limit of 10; shorten it"
    assert refusal(session, TERMS, "hi", "r1") is None
    assert accept(session, "hi") == "queued: turn 2 starts when turn 1 has ended"
    assert "already wait" in refusal(session, TERMS, "more", "r1")
    session.closing = True
    assert "is ending" in refusal(session, TERMS, "hi", "r1")


def test_turns_begin_and_end_with_their_step_numbers():
    session = first_session("the task")
    end_turn(session, 3, AgentState.FINISHED, StopReason.TERMINATED, "first answer", None)
    assert session.idle and session.turns[0].last_step == 3 and session.turns[0].ended
    assert accept(session, "next") == "turn 2 starts now"
    assert begin_turn(session, 3) == "next"
    assert (session.turn, session.idle, session.inbox) == (2, False, [])
    assert (session.current.message, session.current.first_step, session.current.ended) == ("next", 4, False)
    assert goes_on(AgentState.ERROR) and goes_on(AgentState.FINISHED) and not goes_on(AgentState.CANCELLED)


def test_a_closed_run_that_was_no_session_goes_on_as_its_turn_two():
    session = reopened(None, "the task", 5, (AgentState.FINISHED, StopReason.ANSWERED, "the answer"), "follow up")
    (first,) = session.turns
    assert (first.turn, first.message, first.first_step, first.last_step, first.answer) == (1, "the task", 1, 5, "the answer")
    assert session.idle and session.inbox == ["follow up"] and not session.closing


def test_the_idle_note_says_how_long_and_how_to_come_back():
    assert idle_note(1800, "r1", None) == (
        'the session was idle for 30 min and ended; go on with: python starter.py chat r1 "..."'
    )
    assert idle_note(7200, "r1", "budget spent").startswith("budget spent\nthe session was idle for 2 h")
