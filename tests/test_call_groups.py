"""agent_model/call_groups.py: which calls of a reply run together (no server)."""

from __future__ import annotations

from agent_model.call_groups import call_groups


def test_no_call_no_group():
    assert call_groups([]) == []


def test_calls_that_may_not_run_beside_others_run_one_by_one():
    assert call_groups([False, False, False]) == [[0], [1], [2]]


def test_consecutive_marked_calls_form_one_group():
    assert call_groups([True, True, True]) == [[0, 1, 2]]


def test_an_unmarked_call_cuts_the_group_and_runs_alone_in_its_place():
    assert call_groups([True, False, True]) == [[0], [1], [2]]
    assert call_groups([True, True, False, True, True]) == [[0, 1], [2], [3, 4]]


def test_a_marked_call_next_to_unmarked_ones_is_alone():
    assert call_groups([False, True, False]) == [[0], [1], [2]]
    assert call_groups([False, True, True]) == [[0], [1, 2]]


def test_every_index_once_in_the_models_order():
    marks = [True, False, True, True, False, False, True]
    assert [index for group in call_groups(marks) for index in group] == list(range(len(marks)))
