"""The data-analysis packages of the sandbox's Python.

Tool code runs the worker's own interpreter (activities/tools/sandbox.py), so
what it can import is what this worker's Python has installed:
requirements.txt pins numpy, pandas and matplotlib. A worker without them
runs every tool but the chart tool, and python_execute's `import pandas`
fails there like any ImportError.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata

PACKAGES = ("numpy", "pandas", "matplotlib")


@dataclass(frozen=True)
class AnalysisPackages:
    versions: tuple[tuple[str, str], ...] = ()
    """(name, version) of each package installed."""
    missing: tuple[str, ...] = PACKAGES

    @classmethod
    def detect(cls, version: Callable[[str], str] = metadata.version) -> AnalysisPackages:
        """What is installed, read from the packages' metadata (nothing is
        imported: pandas and matplotlib take a second to load)."""
        found, missing = [], []
        for name in PACKAGES:
            try:
                found.append((name, version(name)))
            except metadata.PackageNotFoundError:
                missing.append(name)
        return cls(tuple(found), tuple(missing))

    @property
    def charts(self) -> bool:
        return not self.missing

    def describe(self) -> str:
        """The worker's start line about them."""
        if self.charts:
            listed = ", ".join(f"{name} {version}" for name, version in self.versions)
            return f"charts: on (the sandbox's Python has {listed})"
        return (
            f"charts: UNAVAILABLE ({', '.join(self.missing)} not installed in this worker's Python); the chart "
            "tool is refused and python_execute cannot import them. Install them: pip install -r requirements.txt"
        )

    @property
    def refusal(self) -> str | None:
        """The chart tool's observation on a worker without them, or None."""
        if self.charts:
            return None
        return (
            f"The chart tool is unavailable on this worker: its Python lacks {', '.join(self.missing)}. "
            "Use the other tools, or finish and say what you could not do."
        )
