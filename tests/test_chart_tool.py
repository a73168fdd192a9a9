"""The chart tool in the real bubblewrap sandbox: every kind writes a valid PNG
or SVG, the observation describes the data that was drawn, and what it will
not draw (paths out of the run directory, symlinks, missing columns, files
that are no CSV, too many inline rows) is an observation that says why."""

from __future__ import annotations

import json
import os
import statistics
import struct
import uuid
from pathlib import Path

import pytest
from temporalio.testing import ActivityEnvironment

from activities.charts.packages import AnalysisPackages
from activities.tools.sandbox import ToolSandbox
from activities.workspace import Workspace
from agent_model.chart import MAX_INLINE_ROWS
from agent_model.run import AgentRunInput
from agent_model.tool_io import ToolRequest, ToolResult
from config.settings import LLMSettings
from runtime.worker_factory import build_worker
from testkit.fake_openai import FakeOpenAI, Reply, call, terminate
from testkit.settings import make_settings
from tests.test_agent_workflow import PROFILE
from tests.test_sandbox import require
from tools.chart import Chart
from workflows.agent import AgentWorkflow

RUN = "run-chart"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
MONTHS = ["2024-01", "2024-02", "2024-03", "2024-04", "2024-05", "2024-06"]
REVENUE = [12.5, 20, 15, 40, 33, 51]
COST = [5, 7, None, 12, 11, 20]
REGIONS = ["North", "South", "East", "West", "North", "East"]


# Each drawing starts matplotlib in the sandbox (~1 s of CPU): the e2e tier, so the default
# tier stays under 5 minutes; the argument checks are unit tests (test_chart_arguments.py).
pytestmark = pytest.mark.e2e


@pytest.fixture
def setup(tmp_path):
    root = tmp_path / "root"
    sandbox = ToolSandbox.detect("auto", root)
    require(sandbox.mode == "bwrap", f"bubblewrap ({sandbox.problem})")
    workspace = Workspace(root, tool_owner=sandbox.tool_owner)
    lines = ["month,revenue,cost,region"] + [
        f"{m},{r},{'' if c is None else c},{g}" for m, r, c, g in zip(MONTHS, REVENUE, COST, REGIONS)
    ]
    (workspace.run_dir(RUN) / "sales.csv").write_text("\n".join(lines) + "\n")
    return workspace, sandbox


async def chart(setup, show_image: bool = False, packages: AnalysisPackages | None = None, **arguments) -> ToolResult:
    workspace, sandbox = setup
    tool = Chart(workspace, sandbox=sandbox, packages=packages or AnalysisPackages.detect(), show_image=show_image)
    return await ActivityEnvironment().run(tool.run, ToolRequest(workspace=RUN, arguments=arguments))


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == PNG_MAGIC and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def written(setup, name: str) -> bytes:
    workspace, _ = setup
    return (workspace.run_dir(RUN) / name).read_bytes()


def number(value: float) -> str:
    return str(int(value)) if value == int(value) else f"{value:.4g}"


# ---- every kind ------------------------------------------------------------------------


async def test_a_line_chart_of_a_csv_is_a_png_and_its_description_matches_the_data(setup):
    result = await chart(setup, data="sales.csv", kind="line", x="month", y=["revenue", "cost"], title="Sales", output="sales.png")
    assert not result.error, result.output
    assert png_size(written(setup, "sales.png")) == (1000, 600)
    costs = [c for c in COST if c is not None]
    text = result.output
    assert text.startswith(f'Wrote sales.png (PNG, 1000×600 px, ') and f'a line chart titled "Sales", drawn from {len(MONTHS)} rows' in text
    assert "x: month (dates, from 2024-01-01 to 2024-06-01)." in text
    assert f"revenue: {len(REVENUE)} points, from {number(min(REVENUE))} to {number(max(REVENUE))}" in text
    assert f"(mean {number(statistics.mean(REVENUE))}), first {number(REVENUE[0])}, last {number(REVENUE[-1])}" in text
    assert f"cost: {len(costs)} points, from {number(min(costs))} to {number(max(costs))}" in text
    assert "Rows left out for want of a number: 1 of cost." in text
    assert result.image_file is None and "image follows" not in text  # no [llm.vision] on this worker


@pytest.mark.parametrize("kind", ["line", "bar", "scatter", "hist", "pie"])
async def test_every_kind_writes_a_png_and_an_svg(setup, kind):
    arguments = dict(data="sales.csv", kind=kind, x="region" if kind in ("bar", "pie") else "revenue", y="revenue")
    if kind == "scatter":
        arguments["y"] = "cost"
    png = await chart(setup, **arguments, output=f"{kind}.png")
    svg = await chart(setup, **arguments, output=f"charts/{kind}.svg")
    assert not png.error and not svg.error, (png.output, svg.output)
    assert png_size(written(setup, f"{kind}.png")) == (1000, 600)
    image = written(setup, f"charts/{kind}.svg")
    assert image.startswith(b"<?xml") and b"<svg" in image[:2000]
    assert svg.output.startswith(f"Wrote charts/{kind}.svg (SVG, ")


async def test_bars_pies_and_histograms_describe_what_they_show(setup):
    bars = await chart(setup, data="sales.csv", kind="bar", x="region", y="revenue", output="bars.png")
    assert f"x: region, {len(REGIONS)} bars ({', '.join(REGIONS)})." in bars.output
    pie = await chart(setup, data="sales.csv", kind="pie", x="month", y="revenue", output="pie.png")
    share = 100 * max(REVENUE) / sum(REVENUE)
    assert f"{len(MONTHS)} in all, total {number(sum(REVENUE))}: {MONTHS[REVENUE.index(max(REVENUE))]} {share:.1f}%" in pie.output
    hist = await chart(setup, data="sales.csv", kind="hist", y="revenue", output="hist.png")
    assert f"Counts of revenue: {len(REVENUE)} values from {number(min(REVENUE))} to {number(max(REVENUE))}" in hist.output
    assert " bins. The fullest bin, " in hist.output


async def test_dollars_in_a_title_or_a_name_are_text(setup):
    rows = [{"price $x^$": 5, "sold": 2}, {"price $x^$": 8, "sold": 1}]
    result = await chart(setup, data=rows, kind="line", x="price $x^$", y="sold", title=r"Cost $\frac{a}{$ per unit", output="d.png")
    assert not result.error, result.output
    assert r'titled "Cost $\frac{a}{$ per unit"' in result.output


async def test_inline_rows_and_a_json_file_are_drawn(setup):
    workspace, _ = setup
    rows = [{"day": d, "visits": v} for d, v in enumerate([3, 9, 4, 12])]
    inline = await chart(setup, data=rows, kind="line", x="day", y="visits", output="visits.png")
    assert "x: day (numbers, from 0 to 3)." in inline.output and "visits: 4 points, from 3 to 12" in inline.output
    (workspace.run_dir(RUN) / "visits.json").write_text(json.dumps({"day": [0, 1, 2], "visits": [5, 6, 7]}))
    from_json = await chart(setup, data="visits.json", kind="scatter", x="day", y="visits", output="v.svg")
    assert not from_json.error and "visits: 3 points, from 5 to 7" in from_json.output


async def test_drawing_again_replaces_the_chart(setup):
    await chart(setup, data="sales.csv", kind="line", y="revenue", output="again.png")
    first = written(setup, "again.png")
    result = await chart(setup, data="sales.csv", kind="bar", x="region", y="revenue", output="again.png")
    assert not result.error and written(setup, "again.png") != first
    workspace, _ = setup
    assert not [p.name for p in workspace.run_dir(RUN).iterdir() if p.name.endswith(".tmp")]


# ---- what it will not draw -------------------------------------------------------------


async def test_paths_out_of_the_run_directory_are_refused(setup, tmp_path):
    for output in ("../escape.png", "/tmp/escape.png", str(tmp_path / "escape.png")):
        result = await chart(setup, data="sales.csv", kind="line", y="revenue", output=output)
        assert result.error and "outside the run's directory" in result.output, result.output
    result = await chart(setup, data="../other/sales.csv", kind="line", y="revenue", output="x.png")
    assert result.error and "leads outside the run's directory" in result.output
    assert not (tmp_path / "escape.png").exists() and not (tmp_path / "root" / "escape.png").exists()


async def test_symlinks_are_neither_read_nor_written_through(setup, tmp_path):
    workspace, _ = setup
    run_dir = workspace.run_dir(RUN)
    secret = tmp_path / "outside.csv"
    secret.write_text("a,b\n1,2\n")
    (run_dir / "link.csv").symlink_to(secret)
    (run_dir / "linked").symlink_to(tmp_path)
    target = tmp_path / "target.png"
    (run_dir / "out.png").symlink_to(target)
    read = await chart(setup, data="link.csv", kind="line", y="b", output="x.png")
    assert read.error and "link.csv is a symbolic link" in read.output, read.output
    under = await chart(setup, data="linked/outside.csv", kind="line", y="b", output="x.png")
    assert under.error and "symbolic link" in under.output
    write = await chart(setup, data="sales.csv", kind="line", y="revenue", output="out.png")
    assert write.error and "output out.png is a symbolic link" in write.output
    through = await chart(setup, data="sales.csv", kind="line", y="revenue", output="linked/x.png")
    assert through.error and "linked is a symbolic link" in through.output
    assert not target.exists() and not (tmp_path / "x.png").exists()
    (run_dir / "adir.png").mkdir()
    directory = await chart(setup, data="sales.csv", kind="line", y="revenue", output="adir.png")
    assert directory.error and "adir.png exists and is not a regular file" in directory.output


async def test_missing_columns_and_files_that_are_no_csv_are_refused(setup):
    workspace, _ = setup
    run_dir = workspace.run_dir(RUN)
    missing = await chart(setup, data="sales.csv", kind="line", x="month", y="profit", output="x.png")
    assert missing.error and "no column 'profit' (its columns: month, revenue, cost, region)" in missing.output
    words = await chart(setup, data="sales.csv", kind="line", y="region", output="x.png")
    assert words.error and "column 'region' holds no numbers" in words.output
    (run_dir / "notes.txt").write_text("hello")
    text = await chart(setup, data="notes.txt", kind="line", y="a", output="x.png")
    assert text.error and "data must be a .csv or .json file" in text.output
    (run_dir / "binary.csv").write_bytes(bytes(range(256)) * 4)
    binary = await chart(setup, data="binary.csv", kind="line", y="a", output="x.png")
    assert binary.error and "binary.csv is not a CSV" in binary.output, binary.output
    nowhere = await chart(setup, data="absent.csv", kind="line", y="a", output="x.png")
    assert nowhere.error and "absent.csv does not exist" in nowhere.output
    assert not (run_dir / "x.png").exists()


async def test_oversize_inline_data_is_refused_before_anything_runs(setup):
    rows = [{"a": i} for i in range(MAX_INLINE_ROWS + 1)]
    result = await chart(setup, data=rows, kind="line", y="a", output="x.png")
    assert result.error and f"over the limit of {MAX_INLINE_ROWS}" in result.output


async def test_a_module_the_model_wrote_is_never_imported_by_the_drawing_program(setup):
    workspace, _ = setup
    (workspace.run_dir(RUN) / "pandas.py").write_text("raise SystemExit('the model s pandas')\n")
    result = await chart(setup, data="sales.csv", kind="line", y="revenue", output="x.png")
    assert not result.error, result.output


async def test_without_pandas_and_matplotlib_the_tool_says_so(setup):
    lacking = AnalysisPackages(versions=(("numpy", "2"),), missing=("pandas", "matplotlib"))
    result = await chart(setup, packages=lacking, data="sales.csv", kind="line", y="revenue", output="x.png")
    assert result.error and "The chart tool is unavailable on this worker: its Python lacks pandas, matplotlib" in result.output
    workspace, _ = setup
    result = await ActivityEnvironment().run(
        Chart(workspace, sandbox=ToolSandbox.refused("no bwrap"), packages=AnalysisPackages.detect()).run,
        ToolRequest(workspace=RUN, arguments=dict(data="sales.csv", kind="line", y="revenue", output="x.png")),
    )
    assert result.error and "the tool sandbox cannot start (no bwrap)" in result.output


# ---- the image, for a vision model --------------------------------------------------------


async def test_a_png_is_named_for_the_model_to_see_only_where_a_vision_model_is(setup):
    png = await chart(setup, show_image=True, data="sales.csv", kind="line", y="revenue", output="seen.png")
    assert png.image_file == "seen.png" and png.output.endswith("The image follows.")
    svg = await chart(setup, show_image=True, data="sales.csv", kind="line", y="revenue", output="seen.svg")
    assert svg.image_file is None and "image follows" not in svg.output


async def test_a_run_shows_its_chart_to_the_vision_model_and_keeps_it_out_of_history(time_skipping_env, tmp_path):
    fake, vision = FakeOpenAI().start(), FakeOpenAI().start()
    try:
        settings = make_settings(fake.base_url, tmp_path / "workspace", tool_sandbox="auto")
        sandbox = ToolSandbox.detect("auto", settings.workspace_root)
        require(sandbox.mode == "bwrap", f"bubblewrap ({sandbox.problem})")
        settings.llm["vision"] = LLMSettings(model="vision-model", base_url=vision.base_url, api_key="test-key")
        rows = [{"x": i, "y": i * i} for i in range(5)]
        fake.turns = [Reply(tool_calls=[call("chart", {"data": rows, "kind": "line", "x": "x", "y": "y", "output": "sq.png"})])]
        vision.responder = lambda body, attempt: terminate("a parabola")
        profile = PROFILE.model_copy(update={"tools": ["chart", "terminate"]})
        async with build_worker(time_skipping_env.client, settings):
            handle = await time_skipping_env.client.start_workflow(
                AgentWorkflow.run, AgentRunInput(task="chart squares", profile=profile),
                id=f"chart-{uuid.uuid4().hex[:8]}", task_queue=settings.task_queue,
            )
            result = await handle.result()
        assert result.final_answer == "a parabola"
        (seen,) = vision.requests
        (shown,) = [m["content"] for m in seen.messages if isinstance(m["content"], list)]
        assert seen.messages[-2]["role"] == "user" and seen.messages[-3]["role"] == "tool"  # right after the call
        assert shown[0]["text"] == "The image sq.png that the tool above wrote."
        url = shown[-1]["image_url"]["url"]
        assert url.startswith("data:image/png;base64,")
        history = json.dumps([str(e) for e in (await handle.fetch_history()).events])
        assert url.partition(",")[2][:200] not in history  # the image's bytes never enter history
        assert "x: x (numbers, from 0 to 4). y: y: 5 points, from 0 to 16" in result.steps[0].tool_calls[0].observation
    finally:
        fake.stop()
        vision.stop()
