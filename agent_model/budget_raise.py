"""The question a run asks at its budget's ceiling, and how its reply is read.

With `Budget.ask_at_ceiling`, a run that reaches a ceiling asks the user
(through the question desk, as ask_human does) for a new one instead of
ending. The reply is read here, in pure code, so a replay reads it as the
first execution did: a higher ceiling goes on, 'stop' ends the run, and
anything else is asked again with the reason, a few times at most.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from agent_model.budget import MAX_COST_CEILING, MAX_TOKENS_CEILING, Budget, budget_text, ceiling_reached, money
from agent_model.payload import clip
from agent_model.usage import TokenUsage

BUDGET_QUESTIONS = 3
"""Questions asked at one ceiling before a reply that raises nothing ends the run."""
QUOTED_REPLY_CHARS = 60
"""Characters of a reply quoted back in the next question."""

STOP_WORDS = frozenset({"stop", "no", "n", "end", "quit", "cancel", "enough", "halt"})
FILLER_WORDS = frozenset(
    {"and", "raise", "raised", "to", "set", "it", "the", "ceiling", "budget", "new", "a", "limit", "go", "on",
     "yes", "y", "ok", "okay", "please", "continue", "up", "max", "of", "with", "make"}
)
AMOUNT = re.compile(
    r"(?P<dollar>\$)?\s*(?P<number>\d+(?:\.\d+)?)\s*(?P<scale>[km](?![a-z]))?\s*(?P<unit>tokens?|usd|dollars?|\$)?"
)
SCALES = {"k": 1_000, "m": 1_000_000}


@dataclass(frozen=True)
class BudgetReply:
    """What a reply to the ceiling's question says: a raised budget (go on),
    a problem (ask again, saying it), or neither (stop)."""

    raised: Budget | None = None
    problem: str | None = None

    @property
    def stops(self) -> bool:
        return self.raised is None and self.problem is None


def ceiling_question(budget: Budget, usage: TokenUsage, cost: float | None, problem: str | None = None) -> str:
    """'Budget reached: 1042 of 1000 tokens. Reply with a new ceiling (e.g.
    2000 tokens) or 'stop'.', after the reason an earlier reply raised nothing."""
    examples = []
    if budget.max_tokens is not None:
        examples.append(f"{2 * max(budget.max_tokens, usage.total_tokens)} tokens")
    if budget.max_cost is not None:
        examples.append(money(2 * max(budget.max_cost, cost or 0.0)))
    asked = (
        f"Budget reached: {budget_text(budget, usage, cost)}. "
        f"Reply with a new ceiling (e.g. {' or '.join(examples)}) or 'stop'."
    )
    return asked if problem is None else f"{problem}. {asked}"


def read_reply(reply: str, budget: Budget, usage: TokenUsage, cost: float | None) -> BudgetReply:
    """Read the user's reply to ceiling_question. A number without a unit
    raises the ceiling that was reached; '20k tokens', '$0.50', '0.5 usd' and
    both together ('30000 tokens and $1') name theirs."""
    text = " ".join(reply.lower().replace(",", "").replace("_", "").split())
    if text.strip(" .!") in STOP_WORDS:
        return BudgetReply()
    quoted = clip(" ".join(reply.split()), QUOTED_REPLY_CHARS)
    unreadable = BudgetReply(problem=f"'{quoted}' is not a ceiling")
    amounts = [m for m in AMOUNT.finditer(text) if m.group("number")]
    rest = AMOUNT.sub(" ", text)
    if not amounts or any(word not in FILLER_WORDS for word in re.findall(r"[^\s.!;:+]+", rest)):
        return unreadable
    reached = ceiling_reached(budget, usage, cost) or ""
    tokens, dollars = budget.max_tokens, budget.max_cost
    for amount in amounts:
        value = float(amount.group("number")) * SCALES.get(amount.group("scale") or "", 1)
        unit = amount.group("unit") or ""
        if amount.group("dollar") or unit in {"usd", "dollar", "dollars", "$"}:
            is_cost = True
        elif unit.startswith("token"):
            is_cost = False
        else:
            is_cost = reached.startswith("cost")
        if is_cost:
            if not budget.prices:
                return BudgetReply(problem="this run has no prices, so a cost ceiling cannot be checked")
            if value > MAX_COST_CEILING:
                return unreadable
            dollars = value
        else:
            if value != int(value) or value > MAX_TOKENS_CEILING:
                return unreadable
            tokens = int(value)
    if tokens is not None and tokens <= usage.total_tokens:
        return BudgetReply(problem=f"{tokens} tokens is not above the {usage.total_tokens} already spent")
    if dollars is not None and cost is not None and dollars <= cost:
        return BudgetReply(problem=f"{money(dollars)} is not above the {money(cost)} already spent")
    raised = budget.model_copy(update={"max_tokens": tokens, "max_cost": dollars})
    return BudgetReply(raised=raised)


def raise_note(before: Budget, after: Budget) -> str:
    """'token budget raised from 1000 to 2000 by the user' (and/or the cost's)."""
    parts = []
    if before.max_tokens != after.max_tokens:
        parts.append(f"token budget raised from {before.max_tokens} to {after.max_tokens}")
    if before.max_cost != after.max_cost:
        shown = money(before.max_cost) if before.max_cost is not None else "none"
        parts.append(f"cost budget raised from {shown} to {money(after.max_cost or 0.0)}")
    return " and ".join(parts) + " by the user"


def raised_by(whole: Budget | None, given: Budget | None, ended_with: Budget | None) -> Budget | None:
    """A flow's budget once its step's run, given `given` (what was left of
    `whole`), ended with `ended_with` because the user raised it: raised by
    as much, so the user's raise pays for the flow's later steps too."""
    if whole is None or given is None or ended_with is None:
        return whole
    tokens, dollars = whole.max_tokens, whole.max_cost
    if ended_with.max_tokens != given.max_tokens and ended_with.max_tokens is not None:
        tokens = (tokens or 0) + ended_with.max_tokens - (given.max_tokens or 0)
    if ended_with.max_cost != given.max_cost and ended_with.max_cost is not None:
        dollars = (dollars or 0.0) + ended_with.max_cost - (given.max_cost or 0.0)
    return whole.model_copy(update={"max_tokens": tokens, "max_cost": dollars})
