"""What callers ask an agent run while it runs (queries) and the one thing
they send it (the answer to its question). All of it reads or changes the
run's one state object, so a closed run answers queries by replay."""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from agent_model.approval_desk import ApprovalClosed, ApprovalDecision, PendingApproval
    from agent_model.budget import run_cost
    from agent_model.errors import APPROVAL_CLOSED_ERROR, QUESTION_CLOSED_ERROR
    from agent_model.human import HumanAnswer, HumanQuestion, QuestionClosed
    from agent_model.memory import Memory
    from agent_model.messages import Message
    from agent_model.payload import fit, newest_within
    from agent_model.plan import PlanBook
    from agent_model.records import StepRecord
    from agent_model.run import AgentRunInput, AgentStatus, records_page
    from agent_model.run_state import RunState


class AgentHandlers:
    input: AgentRunInput
    state: RunState

    @workflow.query
    def status(self) -> AgentStatus:
        state, profile = self.state, self.state.profile
        return AgentStatus(
            agent=profile.name if profile else self.input.agent,
            state=state.agent_state,
            step=state.step,
            max_steps=profile.max_steps if profile else 0,
            steps_recorded=state.records[-1].step if state.records else 0,
            usage=state.usage,
            cost=run_cost(self.input.budget, profile.llm, state.usage) if profile else None,
            pending_question=state.desk.pending,
            pending_approval=state.approvals.pending,
            note=state.note,
        )

    @workflow.query
    def steps(self, since: int = 0) -> list[StepRecord]:
        """Records of the steps after step `since`, as many as fit in one
        answer: ask again from the last one's step for the rest. A long run
        keeps only its newest records (agent_model/continuation.py)."""
        records = self.state.records
        first = records[0].step if records else 1
        return records_page(records, max(0, since - first + 1))

    @workflow.query
    def memory_messages(self) -> list[Message]:
        """The newest messages of the window that fit in one answer."""
        memory: Memory = self.state.memory
        return newest_within(memory.messages)

    @workflow.query
    def plan_book(self) -> PlanBook:
        return fit(self.state.plans)

    @workflow.query
    def pending_question(self) -> HumanQuestion | None:
        return self.state.desk.pending

    @workflow.query
    def pending_approval(self) -> PendingApproval | None:
        """The gated call waiting for a decision (one at a time, in reply order)."""
        return self.state.approvals.pending

    @workflow.update
    async def decide(self, decision: ApprovalDecision) -> str:
        """Approve, reject (with a reason for the model) or edit (approve with
        new arguments) the gated call `decision.call_id`; the decision, its
        sender and the time go into the call's record."""
        desk = self.state.approvals
        try:
            return desk.accept(decision, desk.pending.reason if desk.pending else "", workflow.now())
        except ApprovalClosed as e:  # the validator, in the same step, refuses these first
            raise ApplicationError(str(e), type=APPROVAL_CLOSED_ERROR, non_retryable=True) from None

    @decide.validator
    def _validate_decision(self, decision: ApprovalDecision) -> None:
        refusal = self.state.approvals.refusal(decision)
        if refusal is not None:
            raise ValueError(refusal)

    @workflow.update
    async def answer(self, answer: HumanAnswer) -> str:
        try:
            return self.state.desk.accept(answer)
        except QuestionClosed as e:  # the validator, in the same step, refuses these first
            raise ApplicationError(str(e), type=QUESTION_CLOSED_ERROR, non_retryable=True) from None

    @answer.validator
    def _validate_answer(self, answer: HumanAnswer) -> None:
        refusal = self.state.desk.refusal(answer)
        if refusal is not None:
            raise ValueError(refusal)
