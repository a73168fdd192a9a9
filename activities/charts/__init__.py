"""The chart tool's worker side: the data packages the sandbox's Python has,
and the drawing program it runs there (tools/chart.py is the tool)."""

from pathlib import Path

DRAW_PROGRAM = Path(__file__).with_name("draw.py")
"""The program the chart tool runs in the sandbox, as its source text (python -c)."""
