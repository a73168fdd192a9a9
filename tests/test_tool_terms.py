"""How a lost worker's calls are rescheduled is part of a run's tool terms
(agent_model/tool_terms.py): a new run's input says it, an older one lacks it
and keeps the old behaviour, and a hand-made one is bounded."""

from __future__ import annotations

import pytest

from agent_model.profiles import MANUS
from agent_model.tool_terms import LOST_WORKER_RESCHEDULES, MAX_LOST_WORKER_RESCHEDULES, ActivityTerms, BadToolTerms
from tools import TOOLS, with_tool_terms


def test_a_new_run_reschedules_the_calls_of_a_lost_worker_of_each_heartbeating_tool():
    terms = with_tool_terms(MANUS).tool_terms
    for name in ("python_execute", "str_replace_editor", "web_fetch"):
        activity = terms[name].activity
        assert activity is not None and activity.heartbeat_seconds is not None
        assert activity.lost_worker_reschedules == LOST_WORKER_RESCHEDULES, name


def test_an_input_written_before_the_field_reschedules_nothing():
    written_before = ActivityTerms.of(TOOLS["python_execute"].activity).model_dump()
    del written_before["lost_worker_reschedules"]
    assert ActivityTerms.model_validate(written_before).lost_worker_reschedules == 0


@pytest.mark.parametrize("reschedules", [-1, MAX_LOST_WORKER_RESCHEDULES + 1])
def test_a_hand_made_input_cannot_keep_a_run_on_one_call_for_hours(reschedules):
    terms = ActivityTerms.of(TOOLS["python_execute"].activity).model_copy(update={"lost_worker_reschedules": reschedules})
    with pytest.raises(BadToolTerms, match="lost_worker_reschedules"):
        terms.config()
