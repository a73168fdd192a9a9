"""`[budget]`: what a run does at its token or cost ceiling (agent_model/budget.py).

    [budget]
    ask_at_ceiling = true   # ask the user for a higher ceiling instead of ending

The ceilings themselves are per run (--max-tokens, --max-cost); the prices are
per LLM profile ([llm] price_per_million_input/_output).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class BudgetSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ask_at_ceiling: bool = False
    """Default False: a run at its ceiling ends with its result and a note; a
    detached run nobody watches would otherwise wait out the question."""
