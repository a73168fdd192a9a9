"""How a lost worker's calls are rescheduled, and which calls run as local
activities, are part of a run's tool terms (agent_model/tool_terms.py): a new
run's input says it, an older one lacks it and keeps the old behaviour, and a
hand-made one is bounded."""

from __future__ import annotations

import pytest

from agent_model.profiles import MANUS
from agent_model.tool_terms import (
    LOST_WORKER_RESCHEDULES,
    MAX_LOST_WORKER_RESCHEDULES,
    ActivityTerms,
    BadToolTerms,
    reads_only,
)
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


def test_a_new_run_reads_with_the_editor_locally_and_nothing_else():
    terms = with_tool_terms(MANUS).tool_terms
    assert terms["str_replace_editor"].local_reads == {"command": ["view"]}
    assert all(not t.local_reads for name, t in terms.items() if name != "str_replace_editor")


@pytest.mark.parametrize(
    "arguments, only_reads",
    [
        ({"command": "view", "path": "a.txt"}, True),
        ({"command": "create", "path": "a.txt", "file_text": "x"}, False),
        ({"path": "a.txt"}, False),
        ({"command": ["view"], "path": "a.txt"}, False),
    ],
)
def test_which_calls_only_read(arguments, only_reads):
    assert reads_only({"command": ["view"]}, arguments) is only_reads


def test_no_rule_reads_no_call():
    assert not reads_only({}, {"command": "view"})


def test_a_local_call_keeps_the_bound_and_the_retries_and_drops_the_heartbeat():
    terms = ActivityTerms.of(TOOLS["str_replace_editor"].activity)
    local, remote = terms.local_config(), terms.config()
    assert local["start_to_close_timeout"] == remote["start_to_close_timeout"]
    assert local["retry_policy"] == remote["retry_policy"]
    assert "heartbeat_timeout" in remote and "heartbeat_timeout" not in local
