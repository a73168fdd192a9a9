"""Which calls of one reply run together.

Consecutive calls that may run beside others (their tool changes nothing
another call could see, and nothing holds them back: no approval gate, not
over the per-reply limit) form one group, whose activities run at once;
every other call runs alone, in the model's order. Observations always keep
the model's order, whatever finishes first.
"""

from __future__ import annotations

from collections.abc import Sequence


def call_groups(may_run_beside: Sequence[bool]) -> list[list[int]]:
    """The reply's call indexes, in order, cut into the groups that run one
    after another: a run of consecutive marked calls is one group, any other
    call is a group of its own."""
    groups: list[list[int]] = []
    for index, marked in enumerate(may_run_beside):
        if marked and groups and may_run_beside[groups[-1][-1]]:
            groups[-1].append(index)
        else:
            groups.append([index])
    return groups
