"""What matplotlib costs a python_execute call in the tool sandbox: the first
`import matplotlib.pyplot` of a run (it builds the font list in the run's
.cache/matplotlib) against a later one (it reads it), and pandas' import.

    python -m bench.sandbox_matplotlib [ROUNDS]

Each round is a fresh run directory: one call that imports pyplot first, then
one that imports it again, then one that imports pandas; interleaved, so a
busy machine slows both kinds alike. Reported: the median import time inside
the call and of the whole call (sandbox start included), and the ratio first/later.
Needs bubblewrap (the real sandbox) and the packages of requirements.txt.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

from temporalio.testing import ActivityEnvironment

from activities.tools.sandbox import ToolSandbox
from activities.workspace import Workspace
from agent_model.tool_io import ToolRequest
from tools.python_execute import PythonExecute

TIMED = "import time\nstarted = time.perf_counter()\nimport {module}\nprint(time.perf_counter() - started)"


async def call(tool: PythonExecute, run: str, module: str) -> tuple[float, float]:
    """(seconds the import took inside the call, seconds the whole call took)."""
    started = time.perf_counter()
    result = await ActivityEnvironment().run(tool.run, ToolRequest(workspace=run, arguments={"code": TIMED.format(module=module)}))
    whole = time.perf_counter() - started
    if result.error:
        raise SystemExit(f"the call failed: {result.output}")
    return float(result.output.split()[-1]), whole


async def main(rounds: int) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-mpl-") as scratch:
        root = Path(scratch) / "workspace"
        sandbox = ToolSandbox.detect("auto", root)
        if sandbox.mode != "bwrap":
            raise SystemExit(f"needs the bubblewrap sandbox: {sandbox.problem}")
        tool = PythonExecute(Workspace(root, tool_owner=sandbox.tool_owner), sandbox=sandbox)
        await call(tool, "warm-up", "matplotlib.pyplot")  # the page cache, not the font list
        first, later, pandas = [], [], []
        for index in range(rounds):
            run = f"round-{index}"
            first.append(await call(tool, run, "matplotlib.pyplot"))
            later.append(await call(tool, run, "matplotlib.pyplot"))
            pandas.append(await call(tool, run, "pandas"))
    for name, samples in (("first pyplot import of a run", first), ("later pyplot import", later), ("pandas import", pandas)):
        inside = statistics.median(s[0] for s in samples)
        whole = statistics.median(s[1] for s in samples)
        print(f"{name:30} import {inside * 1000:6.0f} ms   whole call {whole * 1000:6.0f} ms")
    ratio = statistics.median(s[0] for s in first) / statistics.median(s[0] for s in later)
    print(f"first/later import: {ratio:.2f} ({rounds} rounds)")


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 7))
