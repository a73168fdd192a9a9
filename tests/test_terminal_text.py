"""Text from a run is inert on the terminal: no escape sequence or control
character that the model, a tool or a plan wrote reaches the CLI's output
(runtime/terminal_text.py, applied at every print of such text)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import uuid

import pytest

from config.settings import REPO_DIR

from runtime.run_start import start_agent_run, start_planning_flow
from runtime.worker_factory import build_worker
from testkit.e2e import child_env, server_address, start_starter, wait_until
from testkit.fake_openai import Reply, call, terminate, turn_of
from testkit.settings import make_settings
from tests.test_planning_flow import FlowScript, plan_reply

SEQUENCES = {
    "clear screen": "\x1b[2J\x1b[H",
    "colour": "\x1b[31;1m",
    "window title (BEL)": "\x1b]0;owned\x07",
    "window title (ST)": "\x1b]2;owned\x1b\\",
    "clipboard write": "\x1b]52;c;ZWNobyBvd25lZA==\x07",
    "hyperlink": "\x1b]8;;http://evil.example/\x1b\\link\x1b]8;;\x1b\\",
    "device control": "\x1bPq#0;2;0;0;0\x1b\\",
    "application command": "\x1b_hidden\x1b\\",
    "privacy message": "\x1b^hidden\x1b\\",
    "start of string": "\x1bXhidden\x1b\\",
    "reset": "\x1bc",
    "charset": "\x1b(0",
    "8-bit CSI": "\x9b2J",
    "8-bit OSC": "\x9d0;owned\x9c",
    "C1 next line": "\x85",
    "carriage return": "\r",
    "backspace": "\x08",
    "bell": "\x07",
    "delete": "\x7f",
    "NUL": "\x00",
    "vertical tab": "\x0b",
    "form feed": "\x0c",
    "lone ESC": "\x1b",
}
HOSTILE = "start " + " | ".join(f"{name}:{seq}" for name, seq in SEQUENCES.items()) + " end"
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
"""What must never be printed: every C0 control but newline and tab, DEL, C1."""


def test_a_string_sequence_left_open_hides_no_later_line():
    from runtime.terminal_text import inert

    cleaned = inert("step 1 \x1b]0;x\nstep 2: rm -rf /home\nstep 3 \x07 done")
    assert "step 2: rm -rf /home" in cleaned and not CONTROL.search(cleaned), repr(cleaned)


def test_bidirectional_overrides_are_removed():
    """U+202E and its kin make a line show its words in another order."""
    from runtime.terminal_text import inert

    assert inert("ok \u202etxt.exe\u202c \u2066a\u2069 \u202a\u202b\u202d") == "ok txt.exe a "


def test_the_workers_log_lines_are_inert():
    """worker.py's log quotes what MCP servers, models and pages sent."""
    import io
    import logging

    import worker

    stream = io.StringIO()
    logger = logging.getLogger("test.worker_log")
    logger.addHandler(worker.log_handler(stream))
    try:
        logger.warning("MCP server %s: %s", "web", HOSTILE)
    finally:
        logger.handlers.clear()
    line = stream.getvalue()
    assert "MCP server web: start clear screen:" in line and "form feed:" in line
    assert not CONTROL.search(line.rstrip("\n")), repr(line)


def test_the_starters_own_worker_logs_inert_lines_without_tracebacks():
    """An activity of the starter's in-process worker logs through logging's
    last resort unless the CLI gives the root logger a handler."""
    import subprocess
    import sys

    script = (
        "import logging\n"
        "from runtime.cli import cli_runtime\n"
        "cli_runtime()\n"
        "log = logging.getLogger('activities.mcp.link')\n"
        "try:\n"
        "    raise RuntimeError('boom \\x1b]52;c;ZXZpbA==\\x07')\n"
        "except RuntimeError:\n"
        "    log.exception('MCP server %s failed: %s', 'web', '\\x1b[2Jcleared')\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=REPO_DIR)
    assert done.returncode == 0, done.stderr
    assert "MCP server web failed: cleared" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and not CONTROL.search(done.stderr.replace("\n", "")), repr(done.stderr)


@pytest.mark.parametrize("name", list(SEQUENCES))
def test_each_sequence_is_removed(name):
    from runtime.terminal_text import inert

    cleaned = inert(f"before {SEQUENCES[name]}\nafter")
    assert not CONTROL.search(cleaned), repr(cleaned)
    assert cleaned.startswith("before ") and cleaned.endswith("\nafter")


def test_string_sequences_go_whole_and_plain_text_stays():
    from runtime.terminal_text import inert

    assert inert("a\x1b]0;title\x07b\x1bPdata\x1b\\c\x9d1;x\x9cd") == "abcd"
    assert inert("tab\there\nnew line, é, 😀, ✓") == "tab\there\nnew line, é, 😀, ✓"
    assert inert("over\rwritten, line\r\nnext") == "overwritten, line\nnext"
    assert inert("unterminated \x1b]0;rest stays") == "unterminated 0;rest stays"
    assert inert("lone \ud800 surrogate") == "lone \ufffd surrogate"
    assert inert(42) == "42"


def assert_inert(what: str, text: str) -> None:
    found = CONTROL.search(text)
    assert found is None, f"{what} printed {found.group()!r}: {text!r}"


def responder(flow: FlowScript):
    """The agent run's replies (told by its task), else the flow's."""
    agent = [
        Reply(
            content=f"thinking {HOSTILE}",
            tool_calls=[
                call("python_execute", {"code": f"print({HOSTILE!r})"}),
                call(f"rocket\x1b]0;owned\x07{SEQUENCES['clear screen']}", {}),
            ],
        ),
        Reply(tool_calls=[call("ask_human", {"inquire": f"Which colour? {HOSTILE}"})]),
        terminate(f"answer {HOSTILE}"),
    ]

    def reply(body: dict, attempt: int) -> Reply:
        if "Pick a colour" in json.dumps(body["messages"][:3]):
            return agent[min(turn_of(body), len(agent) - 1)]
        return flow(body, attempt)

    return reply


@pytest.mark.e2e  # starter.py/worker.py processes on the dev server
async def test_no_control_sequence_of_a_run_reaches_the_terminal(dev_env, fake_llm, tmp_path):
    """attach (step lines, the question, the result), answer, show and list
    on an agent run and a flow whose model text, tool output, question, plan
    and summary hold every sequence (`result` prints what attach does)."""
    flow_script = FlowScript(
        plan=plan_reply(f"[MANUS] first {HOSTILE}"),
        steps={1: [terminate(f"step done {HOSTILE}")]},
        summary=f"Summary {HOSTILE}",
    )
    fake_llm.responder = responder(flow_script)
    settings = make_settings(fake_llm.base_url, tmp_path / "workspace")
    env = child_env(tmp_path, address=server_address(dev_env), task_queue=settings.task_queue, base_url=fake_llm.base_url)
    outputs: dict[str, str] = {}

    def cli(*args: str, name: str):
        return start_starter([*args], env, tmp_path / "logs", name=name)

    async def finished(child, name: str) -> None:
        try:
            code = await child.wait(60)
        finally:
            await child.stop()
        assert code in (0, 1), child.describe()
        outputs[name] = child.stdout() + child.stderr()

    run_id, flow_id = f"inert-{uuid.uuid4().hex[:8]}", f"inert-flow-{uuid.uuid4().hex[:8]}"
    async with build_worker(dev_env.client, settings):
        try:
            await start_agent_run(
                dev_env.client, settings, "Pick a colour", agent="manus",
                max_steps=None, steps_per_run=None, run_id=run_id,
            )
            await start_planning_flow(
                dev_env.client, settings, "Plan it", agents=("manus",), timeout=600,
                max_steps=None, steps_per_run=None, run_id=flow_id,
            )
            attach = cli("attach", run_id, "--worker", "never", name="attach")
            await wait_until(lambda: "? waiting for an answer" in attach.stdout(), 60, "the question", 0.1)
            await finished(cli("answer", run_id, "blue", "--worker", "never", name="answer"), "answer")
            await finished(attach, "attach")
            await finished(cli("attach", flow_id, "--worker", "never", name="attach-flow"), "attach-flow")
            await asyncio.gather(
                finished(cli("show", run_id, "--worker", "never", name="show"), "show"),
                finished(cli("show", flow_id, "--worker", "never", name="show-flow"), "show-flow"),
                finished(cli("list", name="list"), "list"),
            )
        finally:
            for target in (run_id, flow_id):
                with contextlib.suppress(Exception):
                    await dev_env.client.get_workflow_handle(target).terminate("test over")

    for name, text in outputs.items():
        assert_inert(name, text)
    # The run's text was printed (made inert), not dropped.
    assert "python_execute → start clear screen:" in outputs["attach"] and "answer start" in outputs["attach"]
    assert "? waiting for an answer to question 2.1" in outputs["attach"]
    assert "Which colour? start" in outputs["answer"]
    assert "thought: thinking start" in outputs["show"] and "unknown tool 'rocket'" in outputs["show"]
    assert "first start" in outputs["attach-flow"] and "Summary start" in outputs["attach-flow"]
    assert "first start" in outputs["show-flow"] and flow_id in outputs["list"]
