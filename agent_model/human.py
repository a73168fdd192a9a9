"""The run's question to the user (ask_human) and who gets to close it.

An answer (the `answer` update) and the question's timeout can reach the
workflow in the same activation. Whichever the workflow handles first closes
the question; the other then finds it closed. So the sender of an answer and
the model always hear the same outcome: an answer confirmed as received is the
one the model gets, and an answer that comes after the timeout is refused.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from agent_model.desk import not_the_waiting_one, remember_closed


class HumanQuestion(BaseModel):
    id: str
    text: str


class HumanAnswer(BaseModel):
    question_id: str
    text: str


class QuestionClosed(Exception):
    """An answer that cannot be taken; the message says why."""


class QuestionDesk(BaseModel):
    """Part of the run's state: it travels whole through continue-as-new, so a
    late answer to an earlier execution's question is refused for its reason."""

    pending: HumanQuestion | None = None
    """The question waiting for an answer."""
    answer: str | None = None
    """The accepted answer to the latest question, if any."""
    closed: dict[str, str] = Field(default_factory=dict)
    """Why each earlier question closed, by question id."""

    def ask(self, question: HumanQuestion) -> None:
        self.pending, self.answer = question, None

    def refusal(self, answer: HumanAnswer) -> str | None:
        """Why `answer` cannot be taken now, or None if it can."""
        waiting = self.pending.id if self.pending else None
        refusal = not_the_waiting_one(
            "question", answer.question_id, waiting, self.closed, "no question is waiting for an answer"
        )
        if refusal is not None:
            return refusal
        if not answer.text.strip():
            return "the answer is empty"
        return None

    def accept(self, answer: HumanAnswer) -> str:
        """Take the answer and close the question; the confirmation for the
        sender. Raises QuestionClosed when it cannot be taken."""
        refusal = self.refusal(answer)
        if refusal is not None:
            raise QuestionClosed(refusal)
        self.answer = answer.text
        self._close("it was answered")
        return f"answer to question {answer.question_id} received"

    def close(self, why: str) -> str | None:
        """Close the waiting question (it timed out, the run was cancelled).
        Returns the answer accepted before, if one was: it stands."""
        if self.pending is not None:
            self._close(why)
        return self.answer

    def _close(self, why: str) -> None:
        assert self.pending is not None
        remember_closed(self.closed, self.pending.id, why)
        self.pending = None
