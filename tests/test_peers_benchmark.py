"""The side-by-side peer benchmark (bench/peers/) without installing a peer:
its durable-manus and bare legs run at a tiny size on a real dev server and
fake LLM and the report has its shape; a missing peer venv, a peer program
that will not start and a pip without PyPI each give one line, not a crash.
The full comparison, with the peers' venvs, is `python -m bench.peers.compare`
(docs/testing.md); it is not a test, and it times nothing here."""

from __future__ import annotations

import json
import os
import re
import urllib.request
from pathlib import Path

import pytest

from bench.common import FakeLLMProcess, free_port
from bench.context import Environment
from bench.fake_llm import directive_text
from bench.peers.compare import measure, section
from bench.peers.legs import PeerLeg, PeerUnavailable
from bench.peers.peer_harness import Workdir
from bench.peers.setup import AGENTS_SDK, PEERS, PINS_FILE, SetupFailed, ensure

NUMBER = r"\d+\.\d"


async def test_without_peer_venvs_the_report_has_durable_manus_the_bare_loop_and_a_note_per_peer(tmp_path):
    async with Environment(quick=True) as ctx:
        report = await measure(ctx, rounds=1, steps=(2, 3), venvs=tmp_path / "no-venvs", install=False)
    assert list(report.titles) == ["durable-manus", "bare"]
    for leg in report.titles:
        for steps in (2, 3):
            [sample] = report.samples[(leg, steps)]
            assert sample.steps == steps and sample.wall > 0 and sample.cpu >= 0
            assert sample.events > 0 and sample.bytes > 0
    # Each agent step is a think and a tool call: more history for 3 steps than for 2.
    assert report.samples[("durable-manus", 3)][0].events > report.samples[("durable-manus", 2)][0].events
    assert set(report.notes) == {peer.name for peer in PEERS}
    for note in report.notes.values():
        assert "\n" not in note and "not installed" in note and "bench.peers.setup" in note

    result = section(report)
    text = "\n".join(result.markdown)
    assert result.title == "P13 Peers side by side"
    assert re.search(rf"^\| durable-manus \| {NUMBER} \| {NUMBER} \| {NUMBER}", text, re.M), text
    assert re.search(rf"^\| bare Temporal loop \| {NUMBER} \| {NUMBER} \|", text, re.M), text
    assert re.search(r"^\| durable-manus / bare Temporal loop \| \d+\.\d\d \| \d+\.\d\d \|", text, re.M), text
    assert re.search(r"^\| durable-manus \| \d+ \| \d+ \|$", text, re.M), text  # the 3-step run's history
    assert "OpenAI Agents SDK" not in "\n".join(line for line in result.markdown if line.startswith("|"))
    assert [line for line in result.markdown if line.startswith("- ")] == [f"- {n}" for n in report.notes.values()]
    summary = {name: (measured, verdict) for name, measured, _, verdict in result.summary}
    assert summary["P13 durable-manus / best peer per step, 2 steps, wall"] == ("-", "n/a")
    assert summary["P13 durable-manus / bare per step, 3 steps, wall / CPU"][1] in ("met", "MISSED")


async def test_a_peer_program_that_will_not_start_is_one_line(tmp_path):
    leg = PeerLeg(AGENTS_SDK, Path("/bin/false"), tmp_path / "peer.log")
    with pytest.raises(PeerUnavailable) as caught:
        await leg.start("127.0.0.1:1", "http://127.0.0.1:1/v1")
    await leg.stop()
    message = str(caught.value)
    assert message.startswith("agents-sdk: its program exited during start") and "\n" not in message


def test_a_venv_whose_pins_match_is_reused_without_pip(tmp_path):
    python = tmp_path / AGENTS_SDK.name / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text("")  # never run: a reused venv is not touched
    (tmp_path / AGENTS_SDK.name / PINS_FILE).write_text(json.dumps(list(AGENTS_SDK.packages)))
    said: list[str] = []
    assert ensure(AGENTS_SDK, tmp_path, said.append) == python
    assert said == [f"peers: agents-sdk: venv ready ({', '.join(AGENTS_SDK.packages)})"]


@pytest.mark.e2e  # it makes a venv (~10 s): the e2e tier
@pytest.mark.timeout(240)
def test_without_pypi_a_peer_venv_fails_in_one_line(tmp_path, monkeypatch):
    # pip without its config (the machine's extra indexes) and with an index nobody listens on.
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    monkeypatch.setenv("PIP_INDEX_URL", f"http://127.0.0.1:{free_port()}/simple")
    (tmp_path / AGENTS_SDK.name).mkdir()  # a venv of other pins: made again
    said: list[str] = []
    with pytest.raises(SetupFailed) as caught:
        ensure(AGENTS_SDK, tmp_path, said.append)
    message = str(caught.value)
    assert message.startswith("agents-sdk: pip install failed (is PyPI reachable?): ") and "\n" not in message
    assert said[0] == "peers: agents-sdk: pins changed, making the venv again"
    assert not (tmp_path / AGENTS_SDK.name / PINS_FILE).exists()


def test_the_peers_editor_views_its_file_and_nothing_outside_its_dir():
    workdir = Workdir()
    try:
        view = workdir.view("view", "notes.txt")
        assert view.startswith("notes.txt, lines 1-5 of 5:\n     1\tline 1: ")
        assert workdir.view("view", "../etc/passwd").startswith("Error: ../etc/passwd is outside")
        assert workdir.view("create", "x.txt").startswith("Error: only `view`")
    finally:
        workdir.close()


def _reply(base_url: str, messages: list[dict]) -> dict:
    request = urllib.request.Request(
        f"{base_url}/chat/completions", data=json.dumps({"model": "gpt-4o", "messages": messages}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:  # a local fake: seconds at most
        return json.load(response)["choices"][0]["message"]


def test_the_fake_ends_a_turns_script_after_its_turns_even_when_the_window_dropped_the_oldest():
    task = {"role": "user", "content": "Benchmark run. " + directive_text(
        {"tool": "str_replace_editor", "args": {"command": "view", "path": "notes.txt"}, "turns": 40, "run": "t"})}

    def turn(n: int) -> list[dict]:  # the assistant message of turn n and its tool's answer
        call = {"id": f"call_{n}", "type": "function", "function": {"name": "str_replace_editor", "arguments": "{}"}}
        return [{"role": "assistant", "content": f"Turn {n}", "tool_calls": [call]},
                {"role": "tool", "tool_call_id": f"call_{n}", "content": "ok"}]

    fake = FakeLLMProcess(max_seconds=120)
    try:
        # A 100-message window keeps the task and the newest 33 turns of a 40-turn run.
        late = _reply(fake.base_url, [task, *[m for n in range(7, 39) for m in turn(n)]])
        assert late["tool_calls"][0]["id"] == "call_39"
        last = _reply(fake.base_url, [task, *[m for n in range(7, 40) for m in turn(n)]])
        assert not last.get("tool_calls") and "final answer" in last["content"]
    finally:
        fake.stop()
