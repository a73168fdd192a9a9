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


def test_the_starter_marks_the_web_tools_only():
    from agent_model.profiles import get_profile
    from tools import TOOLS, with_tool_terms

    terms = with_tool_terms(get_profile("manus")).tool_terms
    assert {name for name, t in terms.items() if t.concurrent} == {"web_search", "web_fetch"} & set(terms)
    assert {name for name, spec in TOOLS.items() if spec.concurrent} == {"web_search", "web_fetch"}


def test_only_a_stateless_activity_tool_may_run_beside_others():
    import pytest

    from agent_model.tool_spec import ToolSpec
    from tools import TOOLS

    schema = {"type": "function", "function": {"name": "toy", "parameters": {"type": "object", "properties": {}}}}

    async def handler(tools, arguments):
        raise AssertionError("not called")

    with pytest.raises(ValueError, match="only a stateless activity tool"):
        ToolSpec(name="toy", schema=schema, handler=handler, concurrent=True)
    bash = TOOLS["bash"]  # an activity tool with state (its shell's directory)
    with pytest.raises(ValueError, match="only a stateless activity tool"):
        ToolSpec(name="toy", schema=schema, activity=bash.activity, build=bash.build, state=bash.state, concurrent=True)
