"""The chart tool's worker side: the data packages the sandbox's Python has,
and the drawing program it runs there (tools/chart.py is the tool)."""

