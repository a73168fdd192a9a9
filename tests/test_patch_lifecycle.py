"""The patch lifecycle of docs/deploying.md holds (testkit/patch_lifecycle.py).

The product code is checked first; since the v1 baseline has no patches, the
rules are also shown to fail, one by one, on small made-up workflows and
histories.
"""

from __future__ import annotations

import base64
import json
import textwrap
from pathlib import Path

import pytest

from testkit.patch_lifecycle import check, find_calls, history_markers

REPO = Path(__file__).resolve().parent.parent
PRODUCT_PACKAGES = ("workflows", "agent_model", "tools", "activities")
HISTORIES = REPO / "tests" / "histories"


def test_the_product_code_keeps_the_patch_lifecycle():
    assert check(REPO, PRODUCT_PACKAGES, HISTORIES, HISTORIES / "PATCHES.toml") == []
    _, workflows = find_calls(REPO, PRODUCT_PACKAGES)
    assert {"AgentWorkflow", "PlanningFlowWorkflow"} <= workflows  # the scan saw the workflows


def test_a_real_history_marker_is_read():
    """The marker format the checker reads is the SDK's (a history recorded
    with patched("agent-step-interval") before the v1 baseline)."""
    event = {
        "eventType": "EVENT_TYPE_MARKER_RECORDED",
        "markerRecordedEventAttributes": {
            "markerName": "core_patch",
            "details": {"patch-data": {"payloads": [{
                "metadata": {"encoding": "anNvbi9wbGFpbg=="},
                "data": "eyJpZCI6ImFnZW50LXN0ZXAtaW50ZXJ2YWwiLCJkZXByZWNhdGVkIjpmYWxzZX0=",
            }]}},
        },
    }
    assert history_markers({"events": [event]}) == {"agent-step-interval": False}


# ---- made-up projects -----------------------------------------------------------

WELL_KEPT = '''
from temporalio import workflow

NOTE_PATCH = "tool-timeout-named"


@workflow.defn
class Flow:
    @workflow.run
    async def run(self, task: str) -> str:
        """Docstrings come first."""
        self.named = workflow.patched(NOTE_PATCH)
        if task:
            await workflow.sleep(1)
        return "named" if self.named else "plain"
'''


def marker(patch_id: str, deprecated: bool = False) -> dict:
    data = base64.b64encode(json.dumps({"id": patch_id, "deprecated": deprecated}).encode()).decode()
    return {
        "eventType": "EVENT_TYPE_MARKER_RECORDED",
        "markerRecordedEventAttributes": {
            "markerName": "core_patch",
            "details": {"patch-data": {"payloads": [{"metadata": {}, "data": data}]}},
        },
    }


class Project:
    def __init__(self, root: Path) -> None:
        self.root, self.histories = root, root / "histories"
        self.histories.mkdir(parents=True)
        self.manifest = self.histories / "PATCHES.toml"

    def source(self, text: str, name: str = "flow.py") -> Project:
        path = self.root / "workflows" / name
        path.parent.mkdir(exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
        return self

    def history(self, name: str, *markers: dict, workflow: str = "Flow") -> Project:
        started = {
            "eventType": "EVENT_TYPE_WORKFLOW_EXECUTION_STARTED",
            "workflowExecutionStartedEventAttributes": {"workflowType": {"name": workflow}},
        }
        (self.histories / name).write_text(json.dumps({"events": [started, *markers]}), encoding="utf-8")
        return self

    def entries(self, text: str) -> Project:
        self.manifest.write_text(textwrap.dedent(text), encoding="utf-8")
        return self

    def problems(self) -> list[str]:
        return check(self.root, ["workflows"], self.histories, self.manifest)


def well_kept(root: Path) -> Project:
    return (
        Project(root)
        .source(WELL_KEPT)
        .history("flow_named.json", marker("tool-timeout-named"))
        .history("flow_plain.json")
        .entries('["tool-timeout-named"]\nwith = "flow_named.json"\nwithout = ["flow_plain.json"]\n')
    )


def test_a_well_kept_patch_passes(tmp_path):
    assert well_kept(tmp_path).problems() == []


def test_a_deprecated_patch_with_its_marked_history_passes(tmp_path):
    project = well_kept(tmp_path).source(
        WELL_KEPT.replace("self.named = workflow.patched(NOTE_PATCH)", "workflow.deprecate_patch(NOTE_PATCH)")
    )
    project.entries('["tool-timeout-named"]\nwith = "flow_named.json"\n')
    assert project.problems() == []


def rewritten(old: str, new: str):
    return lambda project: project.source(WELL_KEPT.replace(old, new))


PATCHED = "self.named = workflow.patched(NOTE_PATCH)"

BROKEN = {
    "id-not-a-constant": (
        rewritten(PATCHED, "self.named = workflow.patched(task)"),
        "needs a string literal or module-level constant id",
    ),
    "inside-a-condition": (
        rewritten(PATCHED, "if task:\n            self.named = workflow.patched(NOTE_PATCH)"),
        "must be one of the first statements",
    ),
    "in-a-boolean-expression": (
        rewritten(PATCHED, "self.named = bool(task) and workflow.patched(NOTE_PATCH)"),
        "must be one of the first statements",
    ),
    "after-other-work": (
        rewritten(PATCHED, "await workflow.sleep(1)\n        " + PATCHED),
        "must be one of the first statements",
    ),
    "in-another-method": (
        rewritten(
            PATCHED,
            "self.named = self.ask()\n\n    def ask(self) -> bool:\n        return workflow.patched(NOTE_PATCH)",
        ),
        "must be one of the first statements",
    ),
    "answer-not-kept": (rewritten(PATCHED, "workflow.patched(NOTE_PATCH)"), "must be one of the first statements"),
    "passed-around": (
        rewritten(PATCHED, "self.named = decide(workflow.patched)"),
        "workflow.patched is passed around",
    ),
    "imported-under-another-name": (
        lambda p: p.source(
            WELL_KEPT.replace("from temporalio import workflow", "from temporalio import workflow\n"
                              "from temporalio.workflow import patched as ask").replace(
                PATCHED, "self.named = task and ask(NOTE_PATCH)"
            )
        ),
        "workflow.patched('tool-timeout-named') must be one of the first statements",
    ),
    "no-history-without-the-marker": (
        lambda p: p.entries('["tool-timeout-named"]\nwith = "flow_named.json"\n'),
        "patch 'tool-timeout-named': no committed Flow history without its marker",
    ),
    "no-entry-at-all": (
        lambda p: p.entries(""),
        "patch 'tool-timeout-named': no committed Flow history with its marker",
    ),
    "old-branch-history-carries-the-marker": (
        lambda p: p.history("flow_plain.json", marker("tool-timeout-named")),
        "flow_plain.json: listed as patch 'tool-timeout-named' without its marker, but it carries it",
    ),
    "new-branch-history-lacks-the-marker": (
        lambda p: p.history("flow_named.json"),
        "flow_named.json: listed as patch 'tool-timeout-named' with its marker, but it lacks it",
    ),
    "listed-file-missing": (
        lambda p: (p.histories / "flow_plain.json").unlink(),
        "flow_plain.json is not a file in the histories directory",
    ),
    "history-of-another-workflow-type": (
        lambda p: p.history("flow_plain.json", workflow="Other"),
        "no committed Flow history without its marker",
    ),
    "deprecated-without-a-marked-history": (
        lambda p: p.source(WELL_KEPT.replace(PATCHED, "workflow.deprecate_patch(NOTE_PATCH)")).entries(
            '["tool-timeout-named"]\nwith = "flow_plain.json"\n'
        ),
        "flow_plain.json: listed as patch 'tool-timeout-named' with its marker, but it lacks it",
    ),
    "deprecated-still-lists-its-old-branch": (
        lambda p: p.source(WELL_KEPT.replace(PATCHED, "workflow.deprecate_patch(NOTE_PATCH)")),
        "is deprecated: its old branch is gone",
    ),
    "both-patched-and-deprecated": (
        lambda p: p.source(WELL_KEPT.replace(PATCHED, "workflow.deprecate_patch(NOTE_PATCH)"), name="other.py"),
        "patch 'tool-timeout-named' is both patched and deprecated",
    ),
    "manifest-entry-no-code-asks": (
        lambda p: p.entries(p.manifest.read_text() + '\n["gone"]\nwith = "flow_named.json"\n'),
        "no code asks patch 'gone'",
    ),
    "removed-before-deprecated": (
        lambda p: p.history("flow_old.json", marker("removed-too-early")),
        "flow_old.json: carries patch 'removed-too-early', which no code asks",
    ),
}


@pytest.mark.parametrize("breakage", BROKEN, ids=list(BROKEN))
def test_each_rule_fails_when_broken(tmp_path, breakage):
    project = well_kept(tmp_path)
    breaks, expected = BROKEN[breakage]
    breaks(project)
    problems = project.problems()
    assert any(expected in problem for problem in problems), problems


def test_a_deprecated_marker_of_a_removed_patch_is_fine(tmp_path):
    """Histories recorded after deprecate_patch replay once the call is gone."""
    project = well_kept(tmp_path).history("flow_later.json", marker("long-gone", deprecated=True))
    assert project.problems() == []


def test_an_id_imported_from_another_module_resolves(tmp_path):
    project = well_kept(tmp_path)
    project.source('NOTE_PATCH = "tool-timeout-named"\n', name="versions.py")
    project.source(
        WELL_KEPT.replace('NOTE_PATCH = "tool-timeout-named"\n', "")
        .replace("from temporalio import workflow", "from temporalio import workflow\nfrom workflows import versions")
        .replace("workflow.patched(NOTE_PATCH)", "workflow.patched(versions.NOTE_PATCH)")
    )
    assert project.problems() == []
