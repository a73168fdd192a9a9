"""What matplotlib costs a python_execute call in the tool sandbox: the first
`import matplotlib.pyplot` of a run (it builds the font list in the run's
.cache/matplotlib) against a later one (it reads it), and pandas' import.

    python -m bench.sandbox_matplotlib [ROUNDS]

Each round is a fresh run directory: one call that imports pyplot first, then
one that imports it again, then one that imports pandas; interleaved, so a
busy machine slows both kinds alike. Reported: the median import time inside
the call, wall and CPU (the call's processes, fc-list included: steadier on
a shared machine), and of the whole call (sandbox start included), and the
ratios first/later.
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

TIMED = (
    "import os, time\n"
    "cpu = lambda: sum(os.times()[:4])  # children too: the font list's build runs fc-list\n"
    "started, used = time.perf_counter(), cpu()\n"
    "import {module}\n"
    "print(time.perf_counter() - started, cpu() - used)"
)


async def call(tool: PythonExecute, run: str, module: str) -> tuple[float, float, float]:
    """Seconds: the import inside the call (wall, CPU), the whole call (wall)."""
    started = time.perf_counter()
    result = await ActivityEnvironment().run(tool.run, ToolRequest(workspace=run, arguments={"code": TIMED.format(module=module)}))
    whole = time.perf_counter() - started
    if result.error:
        raise SystemExit(f"the call failed: {result.output}")
    wall, cpu = result.output.split()[-2:]
    return float(wall), float(cpu), whole


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
        wall, cpu, whole = (statistics.median(s[i] for s in samples) for i in range(3))
        print(f"{name:30} import {wall * 1000:6.0f} ms wall {cpu * 1000:6.0f} ms CPU   whole call {whole * 1000:6.0f} ms")
    for i, kind in ((0, "wall"), (1, "CPU")):
        ratio = statistics.median(s[i] for s in first) / statistics.median(s[i] for s in later)
        print(f"first/later import, {kind}: {ratio:.2f} ({rounds} rounds)")


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 7))
