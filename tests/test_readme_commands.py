"""The manual's compose commands and Web UI tour hold up.

Every compose command in README.md and docs/*.md (most are in docs/cluster.md)
is written so that Compose v2 (`docker compose`)
and Compose v1 (`docker-compose`, Debian's 1.29) both take it: each is parsed here
with v1's own command-line parser (offline, no Docker engine; skipped when v1 is
not installed as a Python program), and every service it names must be in
docker-compose.yml. The Web UI tour's screenshots must exist and stay small.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
MANUAL = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
CLUSTER_PAGE = REPO / "docs" / "cluster.md"
WEB_UI_PAGE = REPO / "docs" / "web-ui.md"
COMPOSE_FILE = REPO / "docker-compose.yml"
WEBUI_DOCS = REPO / "docs" / "webui"
MAX_SCREENSHOT_BYTES = 300_000

COMPOSE = re.compile(r"(?:^|[\s`(])((?:[A-Z_]+=\S+\s+)*docker(?: compose|-compose)(?=[\s`]|$)[^`\n#]*)", re.M)
"""A compose command in a code block line or an inline code span (leading VAR=value kept)."""


def manual() -> str:
    return "\n".join(page.read_text(encoding="utf-8") for page in MANUAL)


def compose_commands() -> list[list[str]]:
    """The arguments after `docker compose` / `docker-compose` of each compose
    command in the manual that has a subcommand (a trailing `...` dropped)."""
    commands = []
    for match in COMPOSE.finditer(manual()):
        words = shlex.split(match.group(1).strip().removesuffix("...").strip())
        while words and re.fullmatch(r"[A-Z_]+=.*", words[0]):
            words.pop(0)
        words = words[2:] if words[:2] == ["docker", "compose"] else words[1:]
        if words and words not in commands:
            commands.append(words)
    return commands


def compose_services() -> set[str]:
    return set(yaml.safe_load(COMPOSE_FILE.read_text(encoding="utf-8"))["services"])


def test_the_manual_has_the_compose_commands_it_documents():
    commands = [" ".join(c) for c in compose_commands()]
    for expected in ("up -d --build --scale worker=4", "logs -f worker", "down -v", "config -q"):
        assert expected in commands, commands


def test_the_cluster_page_tells_how_to_type_them_with_compose_v1():
    text = " ".join(CLUSTER_PAGE.read_text(encoding="utf-8").split())
    assert "docker-compose up -d --build --scale worker=4" in text
    assert "type `docker-compose` wherever it says `docker compose`" in text


V1_PARSE = r"""
import json, sys
from compose.cli.docopt_command import DocoptDispatcher, NoSuchCommand
from compose.cli.main import TopLevelCommand

results = []
for argv in json.loads(sys.stdin.read()):
    try:
        options, handler, command_options = DocoptDispatcher(
            TopLevelCommand, {"options_first": True, "version": "test"}
        ).parse(["-f", "docker-compose.yml", *argv])
    except (SystemExit, NoSuchCommand) as e:
        results.append({"argv": argv, "error": str(e)[:300]})
        continue
    services = list(command_options.get("SERVICE") or [])
    services += [s.split("=", 1)[0] for s in command_options.get("--scale") or []]
    results.append({"argv": argv, "command": options["COMMAND"], "services": services})
print(json.dumps(results))
"""


def compose_v1_python() -> str | None:
    """The interpreter of an installed Compose v1 (`#!/usr/bin/python3`), if any."""
    program = shutil.which("docker-compose")
    if program is None:
        return None
    with open(program, "rb") as f:
        first = f.readline(200).decode("utf-8", "replace").strip()
    if not first.startswith("#!") or "python" not in first:
        return None
    return first[2:].split()[0]


def test_every_compose_command_parses_with_compose_v1():
    python = compose_v1_python()
    if python is None:
        pytest.skip("Compose v1 is not installed as a Python program (Debian: apt-get install docker-compose)")
    commands = compose_commands()
    result = subprocess.run(
        [python, "-c", V1_PARSE], input=json.dumps(commands), capture_output=True, text=True, cwd=REPO, timeout=60
    )
    if result.returncode != 0 and "No module named 'compose'" in result.stderr:
        pytest.skip(f"{python} cannot import Compose v1")
    assert result.returncode == 0, result.stderr
    known = compose_services()
    for parsed in json.loads(result.stdout):
        assert "error" not in parsed, f"Compose v1 rejects `docker-compose {' '.join(parsed['argv'])}`: {parsed['error']}"
        unknown = set(parsed["services"]) - known
        assert not unknown, f"`{' '.join(parsed['argv'])}` names services not in docker-compose.yml: {unknown}"


def web_ui_section() -> str:
    text = WEB_UI_PAGE.read_text(encoding="utf-8")
    start = text.index("## The tour")
    return text[start : text.index("\n## ", start + 1)]


def test_the_web_ui_tour_screenshots_exist_and_are_small():
    linked = re.findall(r"\]\((webui/[^)]+\.png)\)", web_ui_section())
    assert len(linked) >= 8, linked
    for path in linked:
        file = WEB_UI_PAGE.parent / path
        assert file.is_file(), f"the tour links {path}, which does not exist"
        assert file.stat().st_size < MAX_SCREENSHOT_BYTES, f"{path} is {file.stat().st_size} bytes"
    documented = WEB_UI_PAGE.read_text(encoding="utf-8")
    for file in WEBUI_DOCS.glob("*.png"):
        assert f"webui/{file.name}" in linked or f"`{file.name}`" in documented, f"{file.name} is described nowhere"


def test_the_web_ui_tour_names_the_ui_version_it_describes():
    assert re.search(r"Web UI \*\*\d+\.\d+\.\d+\*\*", web_ui_section())
