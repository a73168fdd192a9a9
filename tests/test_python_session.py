"""python_execute with `keep_state` (the data analyst's profile): one Python
per run, kept by the run's sandbox (activities/tools/python_kernel.py), whose
variables survive between calls; the model is told whenever they did not.
In the real bubblewrap sandbox."""

from __future__ import annotations

import os
import subprocess
import time

import pytest
from temporalio.testing import ActivityEnvironment

from activities.tools.sandbox import ToolSandbox
from activities.workspace import Workspace
from agent_model.profiles import DATA_ANALYSIS, MANUS
from agent_model.tool_io import ToolRequest, ToolResult
from tests.test_sandbox import require
from tools import with_tool_terms
from tools.python_execute import PythonExecute

RUN = "run-session"

pytestmark = pytest.mark.e2e  # sandboxes and sessions started and ended: the default tier stays under 5 min


@pytest.fixture
def session(tmp_path):
    root = tmp_path / "root"
    sandbox = ToolSandbox.detect("auto", root)
    require(sandbox.mode == "bwrap", f"bubblewrap ({sandbox.problem})")
    yield Workspace(root, tool_owner=sandbox.tool_owner), sandbox
    if sandbox.runs is not None:
        sandbox.runs.close_all()


async def python(session, code: str, keep_state: bool = True, timeout: float = 30) -> ToolResult:
    workspace, sandbox = session
    tool = PythonExecute(workspace, timeout=timeout, sandbox=sandbox)
    request = ToolRequest(workspace=RUN, arguments={"code": code}, options={"keep_state": keep_state})
    return await ActivityEnvironment().run(tool.run, request)


def test_the_data_analyst_keeps_its_python_and_is_told_so():
    analyst = with_tool_terms(DATA_ANALYSIS).tool_terms["python_execute"]
    assert analyst.options == {"keep_state": True}
    assert "variables, imports and functions from earlier calls are still there" in analyst.definition["function"]["description"]
    manus = with_tool_terms(MANUS).tool_terms["python_execute"]
    assert manus.options == {} and "Variables do not survive" in manus.definition["function"]["description"]
    with pytest.raises(ValueError, match="kernel"):
        with_tool_terms(DATA_ANALYSIS.model_copy(update={"tool_options": {"python_execute": {"kernel": 1}}}))


async def test_variables_imports_and_functions_survive_between_calls(session):
    first = await python(session, "import statistics\nfigures = [3, 1, 4, 1, 5]\ndef spread(xs): return max(xs) - min(xs)\nprint('ready')")
    assert not first.error and first.output.strip() == "ready", first.output
    second = await python(session, "figures.append(9)\nprint(statistics.median(figures), spread(figures))")
    assert not second.error and second.output.strip() == "3.5 8", second.output
    failed = await python(session, "total = sum(figures)\nraise ValueError('late')")
    assert failed.error and "ValueError: late" in failed.output and "Exit code: 1" in failed.output
    assert 'File "<python_execute>", line 2' in failed.output and "_run" not in failed.output  # the code's frames only
    after = await python(session, "print(total)")
    assert after.output.strip() == "23", "what ran before the exception stays, as in a notebook"


async def test_without_the_option_each_call_is_a_fresh_interpreter(session):
    await python(session, "kept = 1", keep_state=False)
    again = await python(session, "print(kept)", keep_state=False)
    assert again.error and "NameError" in again.output
    assert "session" not in again.output


async def test_no_process_of_a_call_outlives_it_but_the_session_does(session):
    mark = f"{os.getpid()}{time.monotonic_ns() % 10**6:06d}"
    started = await python(session, f"import subprocess\nx = 1\nsubprocess.Popen(['sleep', '310.{mark}'])\nprint('started')")
    assert started.output.strip() == "started", started.output
    assert subprocess.run(["pgrep", "-f", f"sleep 310[.]{mark}"], capture_output=True).stdout == b""
    kept = await python(session, "import numpy\nprint('x is', x)")
    assert kept.output.strip() == "x is 1", "a process of the call was killed, the session kept"
    # numpy's thread pool is the session's: it does not end it.
    assert (await python(session, "print(x + int(numpy.int64(1)))")).output.strip() == "2"
    ended = await python(session, "import os; os._exit(0)")
    assert "the Python session ended with this call (its process exited)" in ended.output
    fresh = await python(session, "print('x' in globals())")
    assert fresh.output.strip() == "False"
    assert "restarted" not in fresh.output, "told once, with the call that ended it"


async def test_a_timeout_ends_the_session_and_says_so(session):
    await python(session, "x = 1")
    slow = await python(session, "import time; time.sleep(60)", timeout=2)
    assert slow.error and "timed out after 2 s" in slow.output
    assert "the Python session ended with this call (its process was killed)" in slow.output
    assert (await python(session, "print('x' in globals())")).output.strip() == "False"


async def test_after_the_sandbox_ends_the_model_learns_its_variables_are_gone_and_files_stay(session):
    """What a worker restart does to the session (the sandbox dies with the worker)."""
    workspace, sandbox = session
    await python(session, "x = 1\nopen('kept.txt', 'w').write('on disk')")
    sandbox.runs.close_all()
    after = await python(session, "print(open('kept.txt').read(), 'x' in globals())")
    assert after.output.startswith("Note: the Python session restarted before this call"), after.output
    assert "on disk False" in after.output
    assert "restarted" not in (await python(session, "print(1)")).output


async def test_a_worker_that_starts_no_run_sandbox_says_variables_do_not_survive(tmp_path):
    root = tmp_path / "root"
    sandbox = ToolSandbox.detect("auto", root, per_run=False)
    require(sandbox.mode == "bwrap", "bubblewrap")
    result = await python((Workspace(root, tool_owner=sandbox.tool_owner), sandbox), "print('hi')")
    assert result.output.startswith("Note: this worker runs each python_execute call in a fresh interpreter")
    assert result.output.rstrip().endswith("hi")


async def test_code_that_writes_to_the_kernels_socket_cannot_upset_the_next_call(session):
    """The code runs in the kernel and can reach its socket to the server
    (descriptor 3). A reply it forges ends its own call early (it is the run's
    own code); what it sends after that is dropped before the next call, and
    nonsense in place of a reply ends the session, said so."""
    await python(session, "x = 7")
    await python(session, "import os, time\nos.write(3, b'{\"status\": 0}')\nos.write(3, b'junk')\ntime.sleep(0.2)")
    after = await python(session, "print('x is', x)")
    assert after.output.strip() == "x is 7", after.output
    nonsense = await python(session, "import os\nos.write(3, b'not json')")
    assert "the Python session ended with this call" in nonsense.output
    assert (await python(session, "print('x' in globals())")).output.strip() == "False"


async def test_code_that_closes_or_replaces_its_output_does_not_silence_the_next_call(session):
    await python(session, "x = 3")
    await python(session, "import os\nos.close(1)\nos.close(2)")
    after = await python(session, "print('x is', x)")
    assert after.output.strip() == "x is 3", after.output
    await python(session, "import sys\nsys.stdout = None")
    assert (await python(session, "print('still', x)")).output.strip() == "still 3"
