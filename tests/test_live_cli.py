"""The starter on a terminal shows the thought a think streams while the step
thinks, and the step's line replaces it: starter.py in a pseudo-terminal,
worker.py beside it on the same workspace root, the dev server, the fake LLM."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
import threading
import uuid

import pytest

from runtime.live_print import DIM
from testkit.e2e import REPO_DIR, STARTER_SCRIPT, child_env, server_address, start_worker, unique_queue, wait_until
from testkit.fake_openai import Reply, call, terminate

pytestmark = pytest.mark.e2e

THOUGHT = "Let me list the files of the directory before I answer anything."
RUN_TIMEOUT = 60.0


class Terminal:
    """starter.py with a pseudo-terminal as its stdout and stderr; what it prints, collected."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        master, slave = pty.openpty()
        self.process = subprocess.Popen(
            [sys.executable, str(STARTER_SCRIPT), *args], cwd=REPO_DIR, env={**env, "COLUMNS": "200"},
            stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, start_new_session=True,
        )
        os.close(slave)
        self.master, self.output = master, b""
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self.master, 4096)
            except OSError:  # the starter closed its end
                return
            if not data:
                return
            self.output += data

    def text(self) -> str:
        return self.output.decode("utf-8", "replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, 9)
        self.process.wait(10)


@pytest.mark.parametrize("streamed", [True, False], ids=["shown", "no-stream"])
async def test_the_starter_shows_the_streamed_thought_until_the_step_is_done(dev_env, fake_llm, tmp_path, streamed):
    gate = threading.Event()
    fake_llm.turns = [
        Reply(content=THOUGHT, tool_calls=[call("str_replace_editor", {"command": "view", "path": "."})]),
        terminate("nothing there"),
    ]
    fake_llm.chunk_gate, fake_llm.chunk_chars = gate, 8
    env = child_env(tmp_path, address=server_address(dev_env), task_queue=unique_queue(), base_url=fake_llm.base_url)
    worker = start_worker(env, tmp_path / "logs")
    terminal = None
    try:
        run_id = f"live-cli-{uuid.uuid4().hex[:6]}"
        args = ["run", "look around", "--worker", "never", "--id", run_id] + ([] if streamed else ["--no-stream"])
        terminal = Terminal(args, env)
        # The stream is held after its first piece ("Let me l"), so the step is still thinking.
        await wait_until(lambda: len(fake_llm.requests) == 1 and fake_llm.requests[0].chunks_sent, RUN_TIMEOUT, "the first piece")
        if streamed:
            await wait_until(lambda: f"{DIM}Let me l" in terminal.text(), RUN_TIMEOUT, f"the thought on the terminal\n{terminal.text()}")
            assert "[1/" not in terminal.text()
        else:
            await wait_until(lambda: "… step 1/" in terminal.text(), RUN_TIMEOUT, "the progress line")
        gate.set()
        await wait_until(lambda: terminal.process.poll() is not None, RUN_TIMEOUT, f"the run's end\n{terminal.text()}")
        out = terminal.text()
        assert terminal.process.returncode == 0, out
        assert re.search(r"\[1/\d+\] str_replace_editor → ", out), out
        assert "nothing there" in out
        if streamed:
            # The rest of the thought arrived too, before the step's line took its place.
            shown_before_the_step = out.split("[1/")[0]
            assert f"{DIM}{THOUGHT}" in shown_before_the_step or THOUGHT[-20:] in shown_before_the_step, out
        else:
            assert DIM not in out and "Let me l" not in out
    finally:
        gate.set()
        if terminal is not None:
            terminal.stop()
        await worker.stop()
