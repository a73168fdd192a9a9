"""python_execute as the data analyst uses it, in the real bubblewrap sandbox:
pandas, numpy and matplotlib import, pyplot draws to a file in the run's
directory (no display), matplotlib keeps its font list in the run directory
so that a later call does not build it again, and TMPDIR is writable."""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.testing import ActivityEnvironment

from activities.charts.packages import PACKAGES, AnalysisPackages
from activities.tools.sandbox import ToolSandbox
from activities.workspace import Workspace
from agent_model.tool_io import ToolRequest, ToolResult
from tests.test_sandbox import require
from tools.python_execute import PythonExecute

RUN = "run-data"

DRAW = """
import matplotlib, numpy, pandas
import matplotlib.pyplot as plt
frame = pandas.DataFrame({"month": range(1, 13), "sales": numpy.arange(12) ** 2})
print("total", int(frame["sales"].sum()), "backend", matplotlib.get_backend())
frame.plot(x="month", y="sales")
plt.savefig("sales.png")
print("cache", matplotlib.get_cachedir())
import os
print("set", os.environ.get("MPLBACKEND"), os.environ.get("MPLCONFIGDIR"))
"""


@pytest.fixture
def setup(tmp_path):
    root = tmp_path / "root"
    sandbox = ToolSandbox.detect("auto", root)
    require(sandbox.mode == "bwrap", f"bubblewrap ({sandbox.problem})")
    return Workspace(root, tool_owner=sandbox.tool_owner), sandbox


async def python(setup, code: str) -> ToolResult:
    workspace, sandbox = setup
    tool = PythonExecute(workspace, sandbox=sandbox)
    return await ActivityEnvironment().run(tool.run, ToolRequest(workspace=RUN, arguments={"code": code}))


def font_lists(run_dir: Path) -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in (run_dir / ".cache" / "matplotlib").glob("fontlist-*.json")}


async def test_pandas_computes_and_pyplot_saves_a_png_in_the_run_directory(setup):
    workspace, _ = setup
    result = await python(setup, DRAW)
    assert not result.error, result.output
    run_dir = workspace.run_dir(RUN)
    assert f"total {sum(i * i for i in range(12))} backend agg" in result.output.lower()
    assert (run_dir / "sales.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"cache {run_dir / '.cache' / 'matplotlib'}" in result.output
    assert f"set Agg {run_dir / '.cache' / 'matplotlib'}" in result.output  # said, not left to HOME and a guess


async def test_the_font_list_is_built_once_per_run_and_tmp_is_writable(setup):
    workspace, _ = setup
    run_dir = workspace.run_dir(RUN)
    first = await python(setup, "import matplotlib.pyplot")
    assert not first.error, first.output
    built = font_lists(run_dir)
    assert len(built) == 1, built
    again = await python(setup, "import matplotlib.pyplot as plt; plt.figure(); plt.text(0, 0, 'hi'); plt.savefig('t.svg')")
    assert not again.error and "Matplotlib" not in again.output, again.output  # no warning of an unusable cache
    assert font_lists(run_dir) == built  # read, not written again
    scratch = await python(setup, "import tempfile\nwith tempfile.NamedTemporaryFile() as f: print(f.name)")
    assert not scratch.error and scratch.output.rpartition("/")[0] == "/tmp", scratch.output  # not the fallback, the cwd


def test_the_worker_knows_which_packages_its_python_has():
    here = AnalysisPackages.detect()
    assert here.charts and [name for name, _ in here.versions] == list(PACKAGES)
    assert here.describe().startswith("charts: on (the sandbox's Python has numpy ")

    def without_pandas(name: str) -> str:
        from importlib.metadata import PackageNotFoundError, version

        if name == "pandas":
            raise PackageNotFoundError(name)
        return version(name)

    lacking = AnalysisPackages.detect(version=without_pandas)
    assert not lacking.charts and lacking.missing == ("pandas",)
    assert lacking.describe().startswith("charts: UNAVAILABLE (pandas not installed in this worker's Python)")
    assert lacking.refusal is not None and "lacks pandas" in lacking.refusal


def test_the_worker_says_at_start_whether_charts_are_on(tmp_path, caplog):
    from runtime.worker_factory import check_worker_settings
    from testkit.settings import make_settings

    caplog.set_level("INFO")
    check_worker_settings(make_settings("http://127.0.0.1:1/v1", tmp_path / "workspace"))
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("charts: ")]
    assert line == AnalysisPackages.detect().describe()
