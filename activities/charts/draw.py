"""The chart tool's drawing program: one chart, drawn inside the tool sandbox.

The worker runs this file's text as `python -I -c SOURCE` in the run's
directory, under the same confinement as python_execute, with the checked
request (agent_model/chart.py ChartRequest.for_program) as JSON on stdin. It
writes one JSON object to the report descriptor the request names:
{"drawn": summary} and exit 0, or {"refused": why} and exit 3; anything else
(a traceback) is a failure the model sees as it is.

It uses only the standard library, pandas and matplotlib: this repository is
not visible in the sandbox, and -I keeps the run directory off sys.path, so a
file the model wrote there (a `pandas.py`) is never imported instead.
"""

import json
import math
import os
import stat
import sys

REFUSED_EXIT = 3
FIGURE_INCHES = (10, 6)
DPI = 100


class Refused(Exception):
    """The chart is not drawn; the message says why, for the model."""


def main():
    request = json.load(sys.stdin)
    limits = request["limits"]
    try:
        outcome, code = {"drawn": draw(request, limits)}, 0
    except Refused as e:
        outcome, code = {"refused": str(e)}, REFUSED_EXIT
    report(request["report_fd"], outcome, limits["report_bytes"])
    sys.exit(code)


def report(fd, outcome, limit):
    data = json.dumps(outcome, allow_nan=False).encode()
    if len(data) > limit and "drawn" in outcome:  # the labels go first, then the slices
        outcome["drawn"]["labels"] = outcome["drawn"]["labels"][:3]
        outcome["drawn"]["slices"] = outcome["drawn"]["slices"][:3]
        data = json.dumps(outcome, allow_nan=False).encode()
    while data:
        data = data[os.write(fd, data):]


def draw(request, limits):
    try:
        import matplotlib
        import pandas
    except ImportError as e:
        raise Refused(f"charts are unavailable on this worker: its Python cannot import {e.name or 'pandas/matplotlib'}")
    matplotlib.use("Agg")
    matplotlib.rcdefaults()  # a matplotlibrc the run left in its config directory changes nothing here
    matplotlib.rcParams["text.parse_math"] = False  # "$5 to $8" in a title or label is text, never TeX
    frame = load(request, limits, pandas)
    if len(frame) == 0:
        raise Refused("the data has no rows")
    if len(frame) > limits["rows"]:
        raise Refused(
            f"the data has {len(frame)} rows; the chart tool draws at most {limits['rows']}: "
            "aggregate or sample them with python_execute first"
        )
    kind, x_name, y_names = request["kind"], request["x"], request["y"]
    if kind == "hist" and not y_names:
        x_name, y_names = None, [request["x"]]
    for name in [x_name, *y_names]:
        if name is not None:
            column(frame, name)

    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=FIGURE_INCHES, dpi=DPI)
    summary = {"kind": kind, "title": request["title"], "rows": len(frame), "x": x_name, "series": []}
    if kind == "pie":
        pie(axes, frame, x_name, y_names[0], summary, limits, pandas)
    elif kind == "hist":
        histogram(axes, frame, y_names, summary, limits, pandas)
    else:
        xy(axes, frame, kind, x_name, y_names, summary, limits, pandas)
    if request["title"]:
        axes.set_title(request["title"])
    figure.tight_layout()
    written = save(figure, request["output"], request["format"])
    summary.update(written, output=request["output"], image_format=request["format"])
    if request["format"] == "png":
        summary["width"], summary["height"] = (round(inches * DPI) for inches in figure.get_size_inches())
    plt.close(figure)
    return summary


# ---- the data ------------------------------------------------------------------------


def load(request, limits, pandas):
    if request["rows"] is not None:
        return pandas.DataFrame.from_records(request["rows"])
    path = request["data_path"]
    with open_inside(path, limits["file_bytes"]) as file:
        if path.lower().endswith(".json"):
            try:
                data = json.load(file)
            except (ValueError, UnicodeDecodeError) as e:
                raise Refused(f"{path} is not a JSON file ({first_line(e)})")
            return frame_of_json(data, path, pandas)
        try:
            return pandas.read_csv(file)
        except UnicodeDecodeError:
            raise Refused(f"{path} is not a CSV text file (it is not UTF-8 text)")
        except (ValueError, pandas.errors.ParserError, pandas.errors.EmptyDataError) as e:
            raise Refused(f"{path} is not a CSV file pandas can read ({first_line(e)})")


def frame_of_json(data, path, pandas):
    """Records ([{"a": 1}, ...]) or columns ({"a": [1, ...], ...})."""
    if isinstance(data, list) and all(isinstance(row, dict) for row in data):
        return pandas.DataFrame.from_records(data)
    if isinstance(data, dict) and all(isinstance(values, list) for values in data.values()):
        if len({len(values) for values in data.values()}) > 1:
            raise Refused(f"{path}: its columns have different lengths")
        return pandas.DataFrame(data)
    raise Refused(f"{path} holds neither a list of row objects nor an object of column lists")


def open_inside(path, limit):
    """The regular file at `path` (relative, without '..') beneath the run
    directory, walked one component at a time: no symlink is followed."""
    parts = path.split("/")
    fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY)
    try:
        for index, part in enumerate(parts):
            last = index == len(parts) - 1
            try:
                info = os.lstat(part, dir_fd=fd)
            except FileNotFoundError:
                raise Refused(f"{path} does not exist in the run's directory")
            if stat.S_ISLNK(info.st_mode):
                raise Refused(f"{path} is a symbolic link (or lies under one); the chart tool reads only plain files")
            if not last and not stat.S_ISDIR(info.st_mode):
                raise Refused(f"{path}: {'/'.join(parts[: index + 1])} is not a directory")
            flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | (0 if last else os.O_DIRECTORY)
            try:
                opened = os.open(part, flags, dir_fd=fd)
            except OSError as e:
                raise Refused(f"{path} cannot be opened ({e.strerror})")
            os.close(fd)
            fd = opened
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise Refused(f"{path} is not a regular file")
        if info.st_size > limit:
            raise Refused(f"{path} is {info.st_size} bytes, over the chart tool's limit of {limit}")
        os.set_blocking(fd, True)
        file = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    return file


def column(frame, name):
    if name not in frame.columns:
        names = [str(c) for c in frame.columns]
        shown = ", ".join(names[:20]) + (", ..." if len(names) > 20 else "")
        raise Refused(f"the data has no column {name!r} (its columns: {shown})")
    values = frame[name]
    if values.ndim != 1:
        raise Refused(f"the data has more than one column named {name!r}")
    return values


def numbers(frame, name, pandas):
    """The column as floats, NaN where it holds no number; Refused when it holds none at all."""
    values = column(frame, name)
    if values.dtype == bool:
        values = values.astype(int)
    converted = pandas.to_numeric(values, errors="coerce").astype(float)
    converted[~converted.map(math.isfinite)] = math.nan
    if converted.notna().sum() == 0:
        raise Refused(f"column {name!r} holds no numbers")
    return converted


def x_axis(frame, name, pandas):
    """(kind, values): numbers, dates, or categories in row order."""
    values = column(frame, name)
    if values.dtype != bool and pandas.api.types.is_numeric_dtype(values):
        return "number", values.astype(float)
    if pandas.api.types.is_datetime64_any_dtype(values):
        return "date", values
    as_numbers = pandas.to_numeric(values, errors="coerce")
    if as_numbers.notna().mean() >= 0.9:
        return "number", as_numbers.astype(float)
    try:
        as_dates = pandas.to_datetime(values.astype(str), errors="coerce", format="mixed")
    except (ValueError, TypeError):
        as_dates = None
    if as_dates is not None and as_dates.notna().mean() >= 0.9:
        return "date", as_dates
    return "category", values.astype(str)


def series_summary(name, values, skipped, first_last=False):
    present = values.dropna()
    summary = {"name": clipped(name), "points": int(present.size), "skipped": int(skipped)}
    if present.size:
        summary.update(low=float(present.min()), high=float(present.max()), mean=float(present.mean()))
        summary["total"] = float(present.sum())
        if first_last:
            summary.update(first=float(present.iloc[0]), last=float(present.iloc[-1]))
    return summary


# ---- the kinds -----------------------------------------------------------------------


def xy(axes, frame, kind, x_name, y_names, summary, limits, pandas):
    """line, scatter and bar: each y column against x (or the row number)."""
    if x_name is None:
        x_kind, x = "row", pandas.Series(range(len(frame)), index=frame.index, dtype=float)
    elif kind == "bar":
        x_kind, x = "category", column(frame, x_name).astype(str)
    else:
        x_kind, x = x_axis(frame, x_name, pandas)
    if kind == "bar" and len(frame) > limits["bars"]:
        raise Refused(f"a bar chart draws at most {limits['bars']} bars and the data has {len(frame)} rows; aggregate them first")
    positions = pandas.Series(range(len(frame)), index=frame.index, dtype=float)
    plotted_x = positions if x_kind == "category" else x
    width = 0.8 / len(y_names)
    for index, name in enumerate(y_names):
        y = numbers(frame, name, pandas)
        keep = y.notna() & (x.notna() if x_kind != "category" else True)
        if kind == "line":
            axes.plot(plotted_x[keep], y[keep], label=name, marker="o" if keep.sum() <= 30 else None)
        elif kind == "scatter":
            axes.scatter(plotted_x[keep], y[keep], label=name, s=12)
        else:
            offset = (index - (len(y_names) - 1) / 2) * width
            axes.bar(positions[keep] + offset, y[keep], width=width, label=name)
        summary["series"].append(series_summary(name, y[keep], len(frame) - int(keep.sum()), first_last=kind == "line"))
    if x_kind == "category":
        labels = list(x)
        step = max(1, len(labels) // 30)  # at most ~30 tick labels stay readable
        axes.set_xticks(list(positions)[::step], [clipped(label, 20) for label in labels[::step]], rotation=45, ha="right")
        summary.update(categories=int(x.nunique()), labels=[clipped(label, 40) for label in labels[: limits["labels"]]])
        if kind == "bar":
            summary["categories"] = len(labels)
        else:
            summary.update(x_low=clipped(labels[0], 40), x_high=clipped(labels[-1], 40))
    elif x_kind in ("number", "date"):
        present = x.dropna()
        low, high = present.min(), present.max()
        summary.update(x_low=shown_value(low), x_high=shown_value(high))
    summary["x_kind"] = x_kind
    axes.set_xlabel(x_name if x_name is not None else "row")
    axes.set_ylabel(y_names[0] if len(y_names) == 1 else "")
    if len(y_names) > 1:
        axes.legend()


def histogram(axes, frame, y_names, summary, limits, pandas):
    import numpy

    all_values = [numbers(frame, name, pandas) for name in y_names]
    present = [values.dropna().to_numpy() for values in all_values]
    edges = numpy.histogram_bin_edges(numpy.concatenate(present), bins="auto")
    if len(edges) > 51:
        edges = numpy.histogram_bin_edges(numpy.concatenate(present), bins=50)
    counts, _, _ = axes.hist(present, bins=edges, label=y_names, alpha=0.8 if len(y_names) > 1 else 1.0)
    first = counts[0] if len(y_names) > 1 else counts
    fullest = int(numpy.argmax(first))
    summary.update(bins=len(edges) - 1, fullest_bin=[float(edges[fullest]), float(edges[fullest + 1]), int(first[fullest])])
    for name, values in zip(y_names, all_values):
        summary["series"].append(series_summary(name, values, int(values.isna().sum())))
    axes.set_xlabel(y_names[0] if len(y_names) == 1 else "value")
    axes.set_ylabel("count")
    if len(y_names) > 1:
        axes.legend()


def pie(axes, frame, x_name, y_name, summary, limits, pandas):
    values = numbers(frame, y_name, pandas)
    labels = column(frame, x_name).astype(str) if x_name is not None else pandas.Series(
        [str(i) for i in range(len(frame))], index=frame.index
    )
    keep = values.notna()
    values, labels = values[keep], labels[keep]
    if (values < 0).any():
        raise Refused(f"column {y_name!r} has negative values; a pie's slices must be sizes of 0 or more")
    if values.sum() <= 0:
        raise Refused(f"column {y_name!r} adds up to 0; a pie has nothing to show")
    if len(values) > limits["slices"]:
        raise Refused(f"a pie chart draws at most {limits['slices']} slices and the data has {len(values)}; group the small ones first")
    axes.pie(values, labels=[clipped(label, 30) for label in labels], autopct="%1.1f%%")
    axes.axis("equal")
    ordered = sorted(zip(labels, values), key=lambda pair: -pair[1])
    summary.update(
        categories=len(values), x_kind="category",
        slices=[{"label": clipped(label, 40), "value": float(value)} for label, value in ordered[: limits["labels"]]],
    )
    summary["series"].append(series_summary(y_name, values, len(frame) - int(keep.sum())))


# ---- the file ------------------------------------------------------------------------


def save(figure, path, image_format):
    """Writes the figure to `path` beneath the run directory: its directories
    are made where missing, no symlink is followed, and an existing entry is
    replaced only if it is a regular file (written beside it, then renamed)."""
    parts = path.split("/")
    fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY)
    try:
        for index, part in enumerate(parts[:-1]):
            try:
                info = os.lstat(part, dir_fd=fd)
            except FileNotFoundError:
                os.mkdir(part, 0o755, dir_fd=fd)
                info = os.lstat(part, dir_fd=fd)
            if not stat.S_ISDIR(info.st_mode):
                what = "a symbolic link" if stat.S_ISLNK(info.st_mode) else "not a directory"
                raise Refused(f"output {path}: {'/'.join(parts[: index + 1])} is {what}")
            opened = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = opened
        name = parts[-1]
        try:
            mode = os.lstat(name, dir_fd=fd).st_mode
        except FileNotFoundError:
            mode = None
        if mode is not None and stat.S_ISLNK(mode):
            raise Refused(f"output {path} is a symbolic link; the chart tool writes only plain files")
        if mode is not None and not stat.S_ISREG(mode):
            raise Refused(f"output {path} exists and is not a regular file")
        scratch = f".{name}.{os.getpid()}.tmp"
        out = os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644, dir_fd=fd)
        try:
            with os.fdopen(out, "wb") as file:
                figure.savefig(file, format=image_format)
                size = file.tell()
            os.replace(scratch, name, src_dir_fd=fd, dst_dir_fd=fd)
        except BaseException:
            try:
                os.unlink(scratch, dir_fd=fd)
            except OSError:
                pass
            raise
    finally:
        os.close(fd)
    return {"bytes": size}


# ---- words ----------------------------------------------------------------------------


def shown_value(value):
    if hasattr(value, "isoformat"):
        text = value.isoformat()
        return text[:10] if text.endswith("T00:00:00") else text[:19]
    number = float(value)
    return f"{number:.6g}" if math.isfinite(number) else str(number)


def clipped(text, limit=100):
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def first_line(error):
    lines = str(error).strip().splitlines()
    return clipped(lines[0] if lines else type(error).__name__, 200)


if __name__ == "__main__":
    main()
