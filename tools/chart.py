"""The chart tool: a line, bar, scatter, histogram or pie chart of tabular data,
written as a PNG or SVG file in the run's directory.

The data and the file names are the model's, so the drawing happens in the
tool sandbox, as python_execute's code does: a fixed program
(activities/charts/draw.py) reads the checked request on its stdin. The
observation describes the chart in words (kind, columns, points, ranges,
title); with `[llm.vision]` configured, a PNG is also shown to that model.
"""

from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING, Any

from temporalio import activity

from agent_model.chart import KINDS, MAX_INLINE_ROWS, ChartRefused, chart_request, describe, read_summary
from agent_model.tool_io import ToolRequest, ToolResult
from agent_model.tool_spec import TOOL_HEARTBEAT, TOOL_RETRIES_AFTER_A_LOST_WORKER, WAIT_FOR_THE_CALL, Timeout, activity_config
from agent_model.tool_spec import ToolSpec

if TYPE_CHECKING:  # worker side; imported when the worker builds the activity
    from activities.charts.packages import AnalysisPackages
    from activities.tools.sandbox import ToolSandbox
    from activities.worker_resources import WorkerResources
    from activities.workspace import Workspace

NAME = "chart"

DRAW_TIMEOUT = 60.0
"""Seconds the drawing program may run: loading pandas and matplotlib takes
1-2 s, drawing 100,000 points a few more."""

REFUSED_EXIT = 3
"""The drawing program's exit code when it refuses the request (activities/charts/draw.py)."""

COLUMNS = {"type": "string"}
SCHEMA = {
    "type": "function",
    "function": {
        "name": NAME,
        "description": (
            "Draw a chart of tabular data into a PNG or SVG file in the run's directory. "
            "You get back the file's name and a description of the chart in words "
            "(kind, columns, number of points, the x and y ranges, the title). "
            "data is a .csv or .json file in the run's directory (a list of row objects or "
            f"an object of column lists), or up to {MAX_INLINE_ROWS} rows given inline as "
            "[{\"column\": value, ...}, ...]. line, scatter and bar draw each y column against x "
            "(the row number when x is left out); hist counts the values of the y columns; pie "
            "draws one y column as slices labelled by x."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "data": {
                    "description": "A .csv or .json file in the run's directory, or the rows themselves.",
                    "anyOf": [
                        {"type": "string"},
                        {"type": "array", "items": {"type": "object"}, "maxItems": MAX_INLINE_ROWS},
                    ],
                },
                "kind": {"type": "string", "enum": list(KINDS), "description": "The kind of chart."},
                "x": {"type": "string", "description": "The column on the x axis (pie: the slice labels)."},
                "y": {
                    "description": "The column, or list of columns, to draw (pie: exactly one).",
                    "anyOf": [COLUMNS, {"type": "array", "items": COLUMNS}],
                },
                "title": {"type": "string", "description": "The chart's title."},
                "output": {
                    "type": "string",
                    "description": "The file to write, ending in .png or .svg, in the run's directory (e.g. sales.png).",
                },
            },
            "required": ["data", "kind", "output"],
        },
    },
}

CONFIG = activity_config(
    start_to_close=Timeout(
        120,
        "must outlast the drawing program's own timeout (60 s) plus start-up and kill; that timeout, not "
        "this one, normally ends a chart that takes too long",
    ),
    heartbeat=TOOL_HEARTBEAT,
    cancellation=WAIT_FOR_THE_CALL,
    retries=TOOL_RETRIES_AFTER_A_LOST_WORKER,
)

class Chart:
    def __init__(
        self,
        workspace: Workspace,
        *,
        sandbox: ToolSandbox,
        packages: AnalysisPackages,
        show_image: bool = False,
        timeout: float = DRAW_TIMEOUT,
    ) -> None:
        """packages: what the sandbox's Python has (without matplotlib and
        pandas every call is refused). show_image: a PNG is shown to the model
        too (the worker has [llm.vision])."""
        from activities.charts import DRAW_PROGRAM
        from activities.tools.process import ProcessTool

        self.workspace = workspace
        self.packages = packages
        self.show_image = show_image
        self.processes = ProcessTool(workspace, timeout, sandbox=sandbox, max_output=4000)
        self.program = DRAW_PROGRAM.read_text()

    @activity.defn(name=NAME)
    async def run(self, request: ToolRequest) -> ToolResult:
        from activities.tools.process import MAX_REPORT_BYTES, read_report

        run_dir = self.workspace.run_dir(request.workspace)
        try:
            wanted = chart_request(request.arguments, str(run_dir))
        except ChartRefused as e:
            return ToolResult(output=str(e), error=True)
        refused = self.processes.refused()
        if refused:
            return refused
        if self.packages.refusal is not None:
            return ToolResult(output=self.packages.refusal, error=True)
        report_read, report_write = os.pipe()
        try:
            try:
                outcome = await self.processes.run_process(
                    # -I: neither PYTHON* variables nor the run directory on sys.path,
                    # so no file the model wrote is imported in place of pandas.
                    [sys.executable, "-I", "-c", self.program],
                    run_name=request.workspace,
                    stdin=json.dumps(wanted.for_program(report_write, MAX_REPORT_BYTES)).encode(),
                    report_fd=report_write,
                )
            finally:
                os.close(report_write)
            report = _report(read_report(report_read))
        finally:
            os.close(report_read)
        if "refused" in report and isinstance(report["refused"], str) and outcome.exit_code == REFUSED_EXIT:
            return ToolResult(output=_refusal(report["refused"]), error=True)
        summary = read_summary(report.get("drawn")) if outcome.exit_code == 0 else None
        if summary is None:
            failed = self.processes.result(outcome, "")
            why = failed.output if failed.error else "The drawing program gave no readable report."
            return ToolResult(output=f"No chart was drawn. {why}".strip(), error=True)
        image = wanted.output if self.show_image and wanted.image_format == "png" else None
        return ToolResult(output=describe(summary, image_follows=image is not None), image_file=image)


def _report(data: bytes) -> dict[str, Any]:
    try:
        report = json.loads(data)
    except ValueError:
        return {}
    return report if isinstance(report, dict) else {}


def _refusal(text: str) -> str:
    """The drawing program's reason (it quotes the data's own names): one clean bounded line."""
    line = " ".join("".join(c if c.isprintable() else " " for c in text).split())[:1000]
    return f"No chart was drawn: {line}."


def build(resources: WorkerResources):
    return Chart(
        resources.workspace, sandbox=resources.sandbox, packages=resources.packages, show_image=resources.vision
    ).run


def summary(arguments: dict[str, Any]) -> str:
    return f"{arguments.get('kind', '')} {arguments.get('output', '')}".strip()


SPEC = ToolSpec(
    name=NAME,
    schema=SCHEMA,
    summary=summary,
    activity=CONFIG,
    changes_files=True,
    build=build,
)
