"""The chart tool's arguments and its words (agent_model/chart.py), without a
server or a sandbox: what is refused before anything runs, and how a drawn
chart is described to a model that cannot see it."""

from __future__ import annotations

import pytest

from agent_model.chart import (
    MAX_INLINE_BYTES,
    MAX_INLINE_ROWS,
    MAX_Y_COLUMNS,
    ChartRefused,
    chart_request,
    describe,
    read_summary,
)

RUN_DIR = "/srv/workspace/run-1"


def request(**arguments):
    return chart_request({"data": "sales.csv", "kind": "line", "y": "revenue", "output": "sales.png", **arguments}, RUN_DIR)


def refusal(**arguments) -> str:
    with pytest.raises(ChartRefused) as refused:
        request(**arguments)
    return str(refused.value)


def test_paths_are_kept_relative_to_the_run_directory():
    checked = request(data=f"{RUN_DIR}/in/sales.csv", output="./charts//sales.PNG", y=["revenue", "cost"], x="month")
    assert (checked.data_path, checked.output, checked.image_format) == ("in/sales.csv", "charts/sales.PNG", "png")
    assert (checked.x, checked.y, checked.rows) == ("month", ("revenue", "cost"), None)


@pytest.mark.parametrize(
    "arguments, expected",
    [
        (dict(output="../other-run/x.png"), "leads outside the run's directory"),
        (dict(output="charts/../../x.png"), "leads outside the run's directory"),
        (dict(output="/etc/x.png"), "is outside the run's directory (/srv/workspace/run-1)"),
        (dict(output=f"{RUN_DIR}-other/x.png"), "is outside the run's directory"),
        (dict(data="/etc/passwd"), "is outside the run's directory"),
        (dict(data="../run-2/sales.csv"), "leads outside the run's directory"),
        (dict(output="chart.jpg"), "must be a file name ending in .png or .svg"),
        (dict(output=RUN_DIR), "must name a file, not the run's directory"),
        (dict(output="x\0.png"), "at most 1024 characters"),
        (dict(data="book.xlsx"), "data must be a .csv or .json file"),
        (dict(data=7), "data must be a path to a .csv or .json file"),
        (dict(kind="area"), "kind must be one of line, bar, scatter, hist, pie, not 'area'"),
        (dict(kind=None), "not nothing"),
        (dict(y=None), "a line chart needs y"),
        (dict(kind="pie", y=["a", "b"]), "a pie chart needs exactly one y column"),
        (dict(kind="hist", y=None), "a histogram needs y"),
        (dict(y=[f"c{i}" for i in range(MAX_Y_COLUMNS + 1)]), f"one chart draws at most {MAX_Y_COLUMNS}"),
        (dict(y=["a", "a"]), "y names a column twice"),
        (dict(y=[1]), "y must be a column name or a list"),
        (dict(x="x" * 101), "x must be a column name of at most 100 characters"),
        (dict(title=5), "title must be a string"),
    ],
)
def test_bad_arguments_are_refused_with_the_reason(arguments, expected):
    assert expected in refusal(**arguments)


def test_inline_rows_are_bounded():
    rows = [{"month": i, "revenue": i * 2} for i in range(10)]
    assert request(data=rows).rows == rows
    assert f"over the limit of {MAX_INLINE_ROWS}" in refusal(data=[{"a": 1}] * (MAX_INLINE_ROWS + 1))
    wide = [{"text": "x" * 1000}] * 100
    assert f"bytes of JSON, over the limit of {MAX_INLINE_BYTES}" in refusal(data=wide)
    assert "data has no rows" in refusal(data=[])
    assert "a list of objects" in refusal(data=[[1, 2]])
    assert "not nested objects or lists" in refusal(data=[{"a": {"b": 1}}])


def test_a_histogram_may_name_its_column_as_x_and_the_title_is_one_clean_line():
    checked = request(kind="hist", y=None, x="age", title="Ages\x1b[31m\nof users")
    assert (checked.x, checked.y, checked.title) == ("age", (), "Ages [31m of users")


def summary(**fields):
    report = {
        "kind": "line", "output": "sales.png", "image_format": "png", "bytes": 20480, "width": 1000, "height": 600,
        "title": "Sales", "rows": 12, "x": "month", "x_kind": "date", "x_low": "2024-01-01", "x_high": "2024-12-01",
        "series": [{"name": "revenue", "points": 12, "low": 10, "high": 98.5, "mean": 51.25, "first": 10, "last": 98.5}],
        **fields,
    }
    parsed = read_summary(report)
    assert parsed is not None
    return parsed


def test_a_line_chart_is_described_by_its_file_columns_points_and_ranges():
    text = describe(summary(), image_follows=True)
    assert text.startswith('Wrote sales.png (PNG, 1000×600 px, 20.0 KiB): a line chart titled "Sales", drawn from 12 rows.')
    assert "x: month (dates, from 2024-01-01 to 2024-12-01)." in text
    assert "y: revenue: 12 points, from 10 to 98.5 (mean 51.25), first 10, last 98.5." in text
    assert text.endswith("The image follows.")
    assert "image follows" not in describe(summary())


def test_bars_pies_and_histograms_say_what_they_count():
    bars = describe(summary(kind="bar", x="region", x_kind="category", categories=14, labels=["N", "S"], width=None))
    assert "(PNG, 20.0 KiB): a bar chart" in bars and "x: region, 14 bars (N, S, …)." in bars
    pie = describe(summary(
        kind="pie", x="region", categories=3, x_kind="category",
        series=[{"name": "revenue", "points": 3, "total": 200, "skipped": 1}],
        slices=[{"label": "N", "value": 100}, {"label": "S", "value": 60}, {"label": "E", "value": 40}],
    ))
    assert "Slices of revenue by region, 3 in all, total 200: N 50.0%, S 30.0%, E 20.0%." in pie
    assert "Rows left out for want of a number: 1 of revenue." in pie
    histogram = describe(summary(
        kind="hist", x=None, bins=20, fullest_bin=[30, 35, 41],
        series=[{"name": "age", "points": 200, "low": 18, "high": 80, "mean": 41.5}],
    ))
    assert "Counts of age: 200 values from 18 to 80 (mean 41.5), in 20 bins. The fullest bin, 30 to 35, holds 41." in histogram


def test_names_from_the_data_are_clean_and_bounded_and_a_bad_report_is_none():
    text = describe(summary(series=[{"name": "evil\x1b]0;title\x07" + "y" * 500, "points": 1}]))
    assert "\x1b" not in text and "\x07" not in text and len(text) < 600
    assert read_summary({"kind": "line"}) is None
    assert read_summary("not a report") is None
