"""A run's budget of tokens and cost, and what its usage costs.

Pure arithmetic on the usage a workflow already holds: the starter resolves
the ceilings and the LLM profiles' prices into the run's input, so a replay
decides as the first execution did, whatever the config says later.
"""

from __future__ import annotations

import math

from pydantic import BaseModel, Field

from agent_model.usage import TokenUsage

PER_MILLION = 1_000_000
MAX_TOKENS_CEILING = 10**12
MAX_COST_CEILING = 10**9
"""The highest ceilings taken (USD for cost): only nonsense is refused."""


class Prices(BaseModel):
    """What one LLM profile's tokens cost, in USD per million."""

    input: float = Field(ge=0, allow_inf_nan=False)
    output: float = Field(ge=0, allow_inf_nan=False)
    cached_input: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    """Prompt tokens served from the provider's cache; None: priced as input."""


class Budget(BaseModel):
    """A run's ceilings and the prices that turn its usage into cost."""

    max_tokens: int | None = Field(default=None, ge=1)
    max_cost: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    """USD."""
    prices: dict[str, Prices] = Field(default_factory=dict)
    """By LLM profile name, for every LLM the run (and a flow's children) may
    use that has prices in the config; empty: no cost is known."""
    ask_at_ceiling: bool = False
    """At a ceiling, ask the user for a higher one (agent_model/budget_raise.py)
    instead of ending; False: end, with the run's result and a note."""

    @property
    def limited(self) -> bool:
        return self.max_tokens is not None or self.max_cost is not None


def cost_of(usage: TokenUsage, prices: Prices | None) -> float | None:
    """USD for `usage` at `prices`; None when the prices are unknown."""
    if prices is None:
        return None
    cached = min(usage.cached_prompt_tokens, usage.prompt_tokens)
    cached_price = prices.input if prices.cached_input is None else prices.cached_input
    return (
        (usage.prompt_tokens - cached) * prices.input
        + cached * cached_price
        + usage.completion_tokens * prices.output
    ) / PER_MILLION


def run_cost(budget: Budget | None, llm: str, usage: TokenUsage) -> float | None:
    """The cost of a run's usage of LLM profile `llm`, if its prices are known."""
    return cost_of(usage, budget.prices.get(llm)) if budget is not None else None


def add_cost(spent: float | None, more: float | None) -> float | None:
    """Costs added; unknown (None) stays unknown only while nothing is known."""
    if spent is None:
        return more
    return spent if more is None else spent + more


def money(cost: float) -> str:
    """USD for people: in cents from a dollar up or when it is whole cents
    ($0.50), else to a hundredth of a cent ($0.0014)."""
    return f"${cost:.2f}" if cost >= 1 or round(cost, 2) == cost else f"${cost:.4f}"


def spent_text(usage: TokenUsage, cost: float | None) -> str:
    """'1234 tokens' or '1234 tokens, $0.0123'."""
    tokens = f"{usage.total_tokens} tokens"
    return tokens if cost is None else f"{tokens}, {money(cost)}"


def ceiling_reached(budget: Budget | None, usage: TokenUsage, cost: float | None) -> str | None:
    """Which ceiling `usage` (costing `cost`) has reached, as the start of a
    note ('token budget of 1000', 'cost budget of $0.50'); None while neither."""
    if budget is None:
        return None
    if budget.max_tokens is not None and usage.total_tokens >= budget.max_tokens:
        return f"token budget of {budget.max_tokens}"
    if budget.max_cost is not None and cost is not None and cost >= budget.max_cost:
        return f"cost budget of {money(budget.max_cost)}"
    return None


def ceiling_note(ceiling: str, after: str, usage: TokenUsage, cost: float | None) -> str:
    """'token budget of 1000 reached after step 3: 1042 tokens spent'."""
    return f"{ceiling} reached after {after}: {spent_text(usage, cost)} spent"


def remaining(budget: Budget | None, usage: TokenUsage, cost: float | None) -> Budget | None:
    """What is left of `budget` once `usage` (costing `cost`) is spent: a
    flow's child gets this (the flow starts none once a ceiling is reached;
    the floors only keep the values valid)."""
    if budget is None:
        return None
    tokens = cost_left = None
    if budget.max_tokens is not None:
        tokens = max(1, budget.max_tokens - usage.total_tokens)
    if budget.max_cost is not None:
        cost_left = max(math.ulp(0.0), budget.max_cost - (cost or 0.0))
    return budget.model_copy(update={"max_tokens": tokens, "max_cost": cost_left})


def budget_text(budget: Budget | None, usage: TokenUsage, cost: float | None) -> str | None:
    """'1042 of 2000 tokens, $0.0100 of $0.50' for the ceilings set; None without any."""
    if budget is None or not budget.limited:
        return None
    parts = []
    if budget.max_tokens is not None:
        parts.append(f"{usage.total_tokens} of {budget.max_tokens} tokens")
    if budget.max_cost is not None:
        parts.append(f"{money(cost or 0.0)} of {money(budget.max_cost)}")
    return ", ".join(parts)
