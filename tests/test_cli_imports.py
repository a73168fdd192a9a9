"""The starter loads the worker stack only for `worker`: its help, a bad
command line and the commands that only read runs stay light (issue 20)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from testkit.e2e import REPO_DIR

WORKER_STACK = ("activities", "playwright", "mcp", "openai", "tiktoken", "runtime.worker_factory", "worker")
"""Packages and modules only a worker needs."""

PROBE = """
import json, sys
sys.argv = ["starter.py", *{args!r}]
sys.path.insert(0, {repo!r})
import starter
try:
    code = starter.main()
except SystemExit as e:
    code = e.code
loaded = sorted(m for m in sys.modules if any(m == p or m.startswith(p + ".") for p in {stack!r}))
print(json.dumps({{"code": code, "loaded": loaded}}), file=sys.__stderr__)
"""


def modules_loaded_by(*args: str, stack: tuple[str, ...] = WORKER_STACK) -> tuple[int, list[str]]:
    """(exit code, modules of `stack` loaded) for `python starter.py ARGS` in a
    fresh interpreter; Temporal is unreachable."""
    code = PROBE.format(args=list(args), repo=str(REPO_DIR), stack=stack)
    env = {"PATH": "/usr/bin:/bin", "TEMPORAL_ADDRESS": "127.0.0.1:9", "HOME": str(REPO_DIR / ".no-home")}
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_DIR, env=env, capture_output=True, text=True, timeout=120
    )
    # The probe's line, wherever it is: under load the interpreter's shutdown
    # after it can still report on the Temporal bridge's thread (the starter
    # itself ends with os._exit and never gets there).
    (line,) = [line for line in proc.stderr.splitlines() if line.startswith('{"code": ')][-1:] or [proc.stderr]
    report = json.loads(line)
    return report["code"], report["loaded"]


@pytest.mark.parametrize(
    "args, code",
    [(["--help"], 0), (["worker", "--help"], 0), (["--agent", "wizard", "do it"], 2), (["list", "--bogus"], 2)],
    ids=["help", "worker-help", "unknown-agent", "bad-option"],
)
def test_help_and_bad_input_load_nothing_of_the_worker(args, code):
    assert modules_loaded_by(*args) == (code, [])


@pytest.mark.parametrize("args", [["list"], ["show", "some-run"], ["result", "some-run"]])
def test_commands_that_read_runs_load_no_worker_side(args):
    # config/settings.py still reads [tools] egress_allow with activities' address
    # rules (a pure module); everything else of activities/ stays out.
    stack = tuple(p for p in WORKER_STACK if p != "activities") + (
        "activities.llm", "activities.browser", "activities.web", "activities.workspace", "activities.context_store",
    )
    code, loaded = modules_loaded_by(*args, stack=stack)
    assert code == 2  # no server to reach, said in one line
    assert loaded == []
