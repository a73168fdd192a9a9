"""The chart tool's arguments, their bounds, and its result in words.

Pure: the worker checks a call's arguments here before anything runs, hands
the drawing program (activities/charts/draw.py, run in the tool sandbox) the
checked request with these bounds, and words the summary that program reports
so that a model without vision knows what the chart shows.
"""

from __future__ import annotations

import math
import posixpath
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from agent_model.payload import json_size

ChartKind = Literal["line", "bar", "scatter", "hist", "pie"]
KINDS: tuple[str, ...] = ("line", "bar", "scatter", "hist", "pie")
DATA_SUFFIXES = (".csv", ".json")
OUTPUT_SUFFIXES = (".png", ".svg")

MAX_Y_COLUMNS = 8
"""Series one chart draws: more is unreadable, and each is a line of the description."""
MAX_NAME_CHARS = 100
"""A column name, as the model writes it."""
MAX_TITLE_CHARS = 200
MAX_PATH_CHARS = 1024
MAX_INLINE_ROWS = 2000
"""Rows given in the call itself; more data belongs in a file (python_execute writes one)."""
MAX_INLINE_BYTES = 64 * 1024
"""JSON bytes of the inline rows: they are in the run's history, once per call."""
MAX_FILE_BYTES = 64 * 1024**2
"""A data file the drawing program reads (pandas needs several times that in memory)."""
MAX_ROWS = 100_000
"""Rows drawn; larger tables are aggregated or sampled first (python_execute)."""
MAX_BARS = 200
MAX_SLICES = 40
MAX_SHOWN_LABELS = 12
"""Bar and pie labels named in the description."""
MAX_DESCRIPTION_CHARS = 3000


class ChartRefused(ValueError):
    """Arguments the chart tool will not draw; the message is the observation."""


@dataclass(frozen=True)
class ChartRequest:
    """A checked call: paths relative to the run directory, no `..` in them."""

    kind: str
    output: str
    data_path: str | None = None
    rows: list[dict[str, Any]] | None = None
    x: str | None = None
    y: tuple[str, ...] = ()
    title: str = ""

    @property
    def image_format(self) -> str:
        return self.output.rsplit(".", 1)[-1].lower()

    def for_program(self, report_fd: int, report_bytes: int) -> dict[str, Any]:
        """What the drawing program reads on its stdin."""
        return {
            "kind": self.kind,
            "output": self.output,
            "format": self.image_format,
            "data_path": self.data_path,
            "rows": self.rows,
            "x": self.x,
            "y": list(self.y),
            "title": self.title,
            "report_fd": report_fd,
            "limits": {
                "report_bytes": report_bytes,
                "file_bytes": MAX_FILE_BYTES,
                "rows": MAX_ROWS,
                "bars": MAX_BARS,
                "slices": MAX_SLICES,
                "labels": MAX_SHOWN_LABELS,
                "name_chars": MAX_NAME_CHARS,
            },
        }


def chart_request(arguments: dict[str, Any], run_dir: str) -> ChartRequest:
    """The call's arguments checked, or ChartRefused saying what is wrong.
    run_dir: the run directory's absolute path, which absolute paths must lie in."""
    kind = arguments.get("kind")
    if kind not in KINDS:
        raise ChartRefused(f"kind must be one of {', '.join(KINDS)}, not {_shown(kind)}.")
    output = _path_in_run_dir(arguments.get("output"), "output", run_dir)
    if not output.lower().endswith(OUTPUT_SUFFIXES):
        raise ChartRefused(f"output must be a file name ending in .png or .svg, not {output!r}.")
    data = arguments.get("data")
    data_path, rows = None, None
    if isinstance(data, str):
        data_path = _path_in_run_dir(data, "data", run_dir)
        if not data_path.lower().endswith(DATA_SUFFIXES):
            raise ChartRefused(
                f"data must be a .csv or .json file in the run's directory (or the rows themselves), not {data_path!r}; "
                "convert other formats with python_execute first."
            )
    elif isinstance(data, list):
        rows = _inline_rows(data)
    else:
        raise ChartRefused("data must be a path to a .csv or .json file in the run's directory, or a list of row objects.")
    x = _column(arguments.get("x"), "x")
    y = _columns(arguments.get("y"))
    if kind == "pie" and len(y) != 1:
        raise ChartRefused("a pie chart needs exactly one y column (the slice sizes); x names the slices.")
    if kind != "hist" and not y:
        raise ChartRefused(f"a {kind} chart needs y: the column (or list of columns) to draw.")
    if kind == "hist" and not y and x is None:
        raise ChartRefused("a histogram needs y: the column (or columns) whose values it counts.")
    title = arguments.get("title", "")
    if not isinstance(title, str):
        raise ChartRefused("title must be a string.")
    return ChartRequest(kind=kind, output=output, data_path=data_path, rows=rows, x=x, y=y, title=_line(title, MAX_TITLE_CHARS))


def _path_in_run_dir(value: Any, name: str, run_dir: str) -> str:
    """`value` as a path relative to the run directory, without `..`."""
    if not isinstance(value, str) or not value.strip():
        raise ChartRefused(f"{name} must be a file path in the run's directory.")
    if len(value) > MAX_PATH_CHARS or "\0" in value:
        raise ChartRefused(f"{name} must be a file path of at most {MAX_PATH_CHARS} characters.")
    path = value.strip()
    root = posixpath.normpath(run_dir)
    if path.startswith("/"):
        if path.rstrip("/") == root:
            path = root + "/"
        if not path.startswith(root + "/"):
            raise ChartRefused(f"{name} {path!r} is outside the run's directory ({root}).")
        path = path[len(root) + 1 :]
    parts = [part for part in path.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise ChartRefused(f"{name} {value!r} leads outside the run's directory ('..' is not allowed).")
    if not parts:
        raise ChartRefused(f"{name} must name a file, not the run's directory.")
    return "/".join(parts)


def _inline_rows(rows: list[Any]) -> list[dict[str, Any]]:
    if not rows:
        raise ChartRefused("data has no rows.")
    if len(rows) > MAX_INLINE_ROWS:
        raise ChartRefused(
            f"data has {len(rows)} inline rows, over the limit of {MAX_INLINE_ROWS}; "
            "write them to a .csv file (python_execute) and pass its path."
        )
    size = json_size(rows)
    if size > MAX_INLINE_BYTES:
        raise ChartRefused(
            f"the inline data is {size} bytes of JSON, over the limit of {MAX_INLINE_BYTES}; "
            "write it to a .csv file (python_execute) and pass its path."
        )
    for row in rows:
        if not isinstance(row, dict):
            raise ChartRefused("inline data must be a list of objects, one per row ({\"column\": value, ...}).")
        for value in row.values():
            if isinstance(value, (dict, list)):
                raise ChartRefused("inline rows hold numbers, strings, true/false or null, not nested objects or lists.")
    return rows


def _column(value: Any, name: str) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str) or len(value) > MAX_NAME_CHARS:
        raise ChartRefused(f"{name} must be a column name of at most {MAX_NAME_CHARS} characters.")
    return value


def _columns(value: Any) -> tuple[str, ...]:
    if value is None or value == "" or value == []:
        return ()
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not all(isinstance(n, str) and 0 < len(n) <= MAX_NAME_CHARS for n in names):
        raise ChartRefused(f"y must be a column name or a list of column names (each at most {MAX_NAME_CHARS} characters).")
    if len(names) > MAX_Y_COLUMNS:
        raise ChartRefused(f"y names {len(names)} columns; one chart draws at most {MAX_Y_COLUMNS}.")
    if len(set(names)) != len(names):
        raise ChartRefused("y names a column twice.")
    return tuple(names)


def _shown(value: Any) -> str:
    return repr(_line(value, 40)) if isinstance(value, str) else ("nothing" if value is None else type(value).__name__)


def _line(text: str, limit: int) -> str:
    """One bounded line: control characters (terminal escapes) become spaces."""
    return " ".join("".join(c if c.isprintable() else " " for c in text).split())[:limit]


# ---- what the drawing program reports, and the words for it ----------------------------


class SeriesSummary(BaseModel):
    name: str
    points: int
    low: float | None = None
    high: float | None = None
    mean: float | None = None
    first: float | None = None
    last: float | None = None
    total: float | None = None
    skipped: int = 0
    """Rows left out: no number there (or no x)."""


class Slice(BaseModel):
    label: str
    value: float


class ChartSummary(BaseModel):
    """The drawing program's report of a chart it wrote."""

    kind: str
    output: str
    image_format: str
    bytes: int
    width: int | None = None
    height: int | None = None
    """Pixels (PNG only)."""
    title: str = ""
    rows: int
    x: str | None = None
    x_kind: Literal["number", "date", "category", "row"] = "row"
    x_low: str | None = None
    x_high: str | None = None
    categories: int | None = None
    """Distinct x values (bar and pie charts, and category axes)."""
    labels: list[str] = []
    """The first x labels (bar charts), at most MAX_SHOWN_LABELS."""
    series: list[SeriesSummary]
    slices: list[Slice] = []
    """A pie's largest slices, largest first."""
    bins: int | None = None
    fullest_bin: tuple[float, float, int] | None = None
    """A histogram's fullest bin of its first series: from, to, count."""


def read_summary(report: Any) -> ChartSummary | None:
    """The report as a summary, or None when it is not one."""
    try:
        return ChartSummary.model_validate(report)
    except ValidationError:
        return None


def describe(summary: ChartSummary, image_follows: bool = False) -> str:
    """The chart in words: file, kind, columns, points, ranges, title."""
    size = f"{summary.width}×{summary.height} px, " if summary.width and summary.height else ""
    head = f"Wrote {_text(summary.output)} ({summary.image_format.upper()}, {size}{_bytes(summary.bytes)})"
    title = f' titled "{_text(summary.title)}"' if summary.title else ""
    sentences = [f"{head}: a {_KIND_WORDS.get(summary.kind, summary.kind)}{title}, drawn from {summary.rows} rows."]
    if summary.kind == "pie":
        sentences.append(_pie(summary))
    elif summary.kind == "hist":
        sentences.append(_histogram(summary))
    else:
        sentences.append(_x_axis(summary))
        sentences.append("y: " + "; ".join(_series(s, summary.kind) for s in summary.series) + ".")
    skipped = [f"{s.skipped} of {_text(s.name)}" for s in summary.series if s.skipped]
    if skipped:
        sentences.append(f"Rows left out for want of a number: {', '.join(skipped)}.")
    if image_follows:
        sentences.append("The image follows.")
    text = " ".join(s for s in sentences if s)
    return text if len(text) <= MAX_DESCRIPTION_CHARS else text[: MAX_DESCRIPTION_CHARS - 1] + "…"


_KIND_WORDS = {"line": "line chart", "bar": "bar chart", "scatter": "scatter plot", "hist": "histogram", "pie": "pie chart"}


def _x_axis(summary: ChartSummary) -> str:
    if summary.x is None or summary.x_kind == "row":
        return f"x: the row number, 0 to {max(summary.rows - 1, 0)}."
    name = _text(summary.x)
    if summary.kind == "bar":
        shown = ", ".join(_text(label) for label in summary.labels)
        more = (summary.categories or 0) > len(summary.labels)
        return f"x: {name}, {summary.categories} bars ({shown}{', …' if more else ''})."
    what = {"number": "numbers", "date": "dates", "category": f"{summary.categories} categories in row order"}[summary.x_kind]
    span = f", from {_text(summary.x_low or '')} to {_text(summary.x_high or '')}" if summary.x_low is not None else ""
    return f"x: {name} ({what}{span})."


def _series(series: SeriesSummary, kind: str) -> str:
    text = f"{_text(series.name)}: {series.points} points"
    if series.low is not None and series.high is not None:
        text += f", from {_number(series.low)} to {_number(series.high)}"
    if series.mean is not None:
        text += f" (mean {_number(series.mean)})"
    if kind == "line" and series.first is not None and series.last is not None:
        text += f", first {_number(series.first)}, last {_number(series.last)}"
    return text


def _pie(summary: ChartSummary) -> str:
    total = sum(s.value for s in summary.slices) if summary.slices else 0.0
    series = summary.series[0] if summary.series else None
    of = f" of {_text(series.name)}" if series else ""
    by = f" by {_text(summary.x)}" if summary.x else ""
    whole = series.total if series is not None and series.total is not None else total
    parts = [f"{_text(s.label)} {_share(s.value, whole)}" for s in summary.slices]
    more = (summary.categories or 0) - len(summary.slices)
    rest = f", and {more} smaller" if more > 0 else ""
    return f"Slices{of}{by}, {summary.categories} in all, total {_number(whole)}: {', '.join(parts)}{rest}."


def _histogram(summary: ChartSummary) -> str:
    counted = "; ".join(
        f"{_text(s.name)}: {s.points} values"
        + (f" from {_number(s.low)} to {_number(s.high)}" if s.low is not None and s.high is not None else "")
        + (f" (mean {_number(s.mean)})" if s.mean is not None else "")
        for s in summary.series
    )
    text = f"Counts of {counted}, in {summary.bins} bins."
    if summary.fullest_bin is not None:
        low, high, count = summary.fullest_bin
        text += f" The fullest bin, {_number(low)} to {_number(high)}, holds {count}."
    return text


def _share(value: float, whole: float) -> str:
    return f"{100 * value / whole:.1f}%" if whole > 0 else _number(value)


def _number(value: float) -> str:
    if not math.isfinite(value):
        return str(value)
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.4g}" if abs(value) < 1e4 else f"{value:,.1f}" if abs(value) < 1e15 else f"{value:.4g}"


def _bytes(size: int) -> str:
    return f"{size} bytes" if size < 1024 else f"{size / 1024:.1f} KiB" if size < 1024**2 else f"{size / 1024**2:.1f} MiB"


def _text(text: str) -> str:
    """A name or label from the data (the model's, or a file's): one short clean line."""
    return _line(text, MAX_NAME_CHARS)
