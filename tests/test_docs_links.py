"""The README stays a front page, and every link of the manual leads somewhere.

README.md is what a newcomer reads first: it must stay short (the manual is
docs/, one page per audience). Every relative link in README.md, BENCHMARKS.md
and docs/*.md must name a file of the repository and, with a `#fragment`, a
heading of that file (GitHub's anchors: lower case, punctuation dropped,
spaces as hyphens, `-1`, `-2` for repeats). Links in code and HTML comments
are not links, so they are not checked.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
PAGES = sorted([README, REPO / "BENCHMARKS.md", *(REPO / "docs").glob("*.md")])

MAX_README_BYTES = 16_000
MAX_README_LINES = 300

LINK = re.compile(r"!?\[(?:[^\]\n]|\n(?!\n))*\]\(([^)\s]+)\)")
"""An inline markdown link or image: its target (the text may wrap a line)."""
FENCE = re.compile(r"^```.*?^```", re.M | re.S)
CODE_SPAN = re.compile(r"`[^`\n]*`")
COMMENT = re.compile(r"<!--.*?-->", re.S)


def prose(text: str) -> str:
    """The text without code blocks, code spans and HTML comments."""
    return CODE_SPAN.sub("", COMMENT.sub("", FENCE.sub("", text)))


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading's text."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    found: set[str] = set()
    for line in FENCE.sub("", page.read_text(encoding="utf-8")).splitlines():
        match = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not match:
            continue
        base = anchor(match.group(1))
        name, n = base, 0
        while name in found:
            n += 1
            name = f"{base}-{n}"
        found.add(name)
    return found


def relative_links(page: Path) -> list[str]:
    targets = LINK.findall(prose(page.read_text(encoding="utf-8")))
    return [t for t in targets if not re.match(r"[a-z][a-z0-9+.-]*:", t)]  # http:, https:, mailto: ...


def broken_links(page: Path) -> list[str]:
    broken = []
    for target in relative_links(page):
        path, _, fragment = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists() or not file.resolve().is_relative_to(REPO):
            broken.append(f"{target} (no such file)")
        elif fragment and (file.is_dir() or fragment not in anchors(file)):
            broken.append(f"{target} (no heading #{fragment} in {file.relative_to(REPO)})")
    return broken


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_leads_to_a_file_and_heading(page):
    assert not broken_links(page), f"{page.relative_to(REPO)}: {broken_links(page)}"


def test_the_scan_finds_the_links():
    assert "docs/tools.md" in relative_links(README)
    assert "../README.md#agents-and-tools" in relative_links(REPO / "docs" / "tools.md")
    assert "webui/list-default.png" in relative_links(REPO / "docs" / "web-ui.md")  # an image


def test_the_anchor_rule_is_githubs():
    assert anchor("What the agent's code can reach") == "what-the-agents-code-can-reach"
    assert anchor("What `run` does") == "what-run-does"
    assert anchor("P4 resume after a worker crash") == "p4-resume-after-a-worker-crash"


def test_the_readme_is_a_front_page():
    data = README.read_bytes()
    lines = data.decode("utf-8").count("\n")
    assert len(data) <= MAX_README_BYTES, f"README.md is {len(data)} bytes: move detail to docs/"
    assert lines <= MAX_README_LINES, f"README.md has {lines} lines: move detail to docs/"


def test_the_readme_links_every_page_of_the_manual():
    linked = {(REPO / t.partition("#")[0]).resolve() for t in relative_links(README)}
    unlinked = [p.name for p in (REPO / "docs").glob("*.md") if p.resolve() not in linked]
    assert not unlinked, f"README.md does not link {unlinked}"
