"""The peers' venvs: python -m bench.peers.setup [--root DIR] [--check]

Each peer gets its own venv under .bench-venvs/ (gitignored), made with
`python -m venv` and filled by pip with the pinned packages below: the peers'
dependencies never meet the project's. Each venv carries temporalio 1.35.0, the
project's own, so every side speaks to the same dev server with the same SDK.
A venv whose recorded pins match is reused as it is; one whose pins differ is
made again. Without PyPI the step fails with one line, and the benchmark runs
without that peer.

Pins: the newest releases that install together (pip index versions,
2026-12). openai-agents 0.24.0 exists, but temporalio-openai-agents 1.1.0, the
newest Temporal integration for Temporal 1.35, requires openai-agents <0.23.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO_DIR = Path(__file__).resolve().parent.parent.parent
VENVS_DIR = REPO_DIR / ".bench-venvs"
TEMPORALIO = "temporalio==1.35.0"
PINS_FILE = "bench-pins.json"
"""Written into a venv once its packages are installed: what it holds."""
PIP_SECONDS = 900.0
"""Longest a peer's install may take: a few dozen wheels on a slow mirror."""


@dataclass(frozen=True)
class Peer:
    name: str
    """The venv's folder name and the name in the report."""
    title: str
    packages: tuple[str, ...]
    program: str
    """The agent program in bench/peers/, run with the venv's python."""
    probe: str
    """A module that imports only if the integration is installed."""


AGENTS_SDK = Peer(
    name="agents-sdk",
    title="OpenAI Agents SDK on Temporal",
    packages=("openai-agents==0.22.3", "temporalio-openai-agents==1.1.0", TEMPORALIO),
    program="agents_sdk_agent.py",
    probe="temporalio.openai_agents",
)
PYDANTIC_AI = Peer(
    name="pydantic-ai",
    title="pydantic-ai on Temporal",
    packages=("pydantic-ai-slim[openai,temporal]==2.68.0", TEMPORALIO),
    program="pydantic_ai_agent.py",
    probe="pydantic_ai.durable_exec.temporal",
)
PEERS = (AGENTS_SDK, PYDANTIC_AI)


class SetupFailed(RuntimeError):
    """A peer's venv could not be made; the message is one line."""


def venv_python(root: Path, peer: Peer) -> Path:
    return root / peer.name / "bin" / "python"


def _recorded(root: Path, peer: Peer) -> list[str] | None:
    try:
        return json.loads((root / peer.name / PINS_FILE).read_text())
    except (OSError, ValueError):
        return None


def is_ready(root: Path, peer: Peer) -> bool:
    return venv_python(root, peer).exists() and _recorded(root, peer) == list(peer.packages)


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("WARNING: Location")]
    return (lines[-1] if lines else "no output")[:300]


def _run(command: list[str], what: str, timeout: float) -> None:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise SetupFailed(f"{what}: still running after {timeout:.0f} s") from None
    if done.returncode != 0:
        raise SetupFailed(f"{what} failed (is PyPI reachable?): {_last_line(done.stderr or done.stdout)}")


def ensure(peer: Peer, root: Path = VENVS_DIR, say=print) -> Path:
    """The venv python of `peer`, made (or remade) if its pins differ.
    Raises SetupFailed with a one-line message."""
    python = venv_python(root, peer)
    if is_ready(root, peer):
        say(f"peers: {peer.name}: venv ready ({', '.join(peer.packages)})")
        return python
    directory = root / peer.name
    if directory.exists():
        say(f"peers: {peer.name}: pins changed, making the venv again")
        shutil.rmtree(directory)
    say(f"peers: {peer.name}: python -m venv {directory}")
    _run([sys.executable, "-m", "venv", str(directory)], f"{peer.name}: python -m venv", 120.0)
    say(f"peers: {peer.name}: pip install {' '.join(peer.packages)}")
    # Few retries and a short timeout, so that no network fails in seconds, not minutes.
    _run(
        [str(python), "-m", "pip", "install", "--quiet", "--retries", "1", "--timeout", "20", *peer.packages],
        f"{peer.name}: pip install",
        PIP_SECONDS,
    )
    _run([str(python), "-c", f"import {peer.probe}"], f"{peer.name}: import {peer.probe}", 120.0)
    (directory / PINS_FILE).write_text(json.dumps(list(peer.packages)))
    say(f"peers: {peer.name}: venv ready")
    return python


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Make the peers' venvs for bench/peers/compare.py.")
    parser.add_argument("--root", type=Path, default=VENVS_DIR, help="where the venvs live (default .bench-venvs/)")
    parser.add_argument("--check", action="store_true", help="only say which venvs are ready; install nothing")
    args = parser.parse_args(argv)
    failed = 0
    for peer in PEERS:
        if args.check:
            print(f"peers: {peer.name}: {'ready' if is_ready(args.root, peer) else 'not installed'}")
            failed += not is_ready(args.root, peer)
            continue
        try:
            ensure(peer, args.root)
        except SetupFailed as exc:
            print(f"peers: {exc}", file=sys.stderr)
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
