"""What every benchmark gets: a scratch dir, the dev server, the fake LLM, a client."""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from temporalio.client import Client

from bench.common import DevServer, FakeLLMProcess, log


@dataclass
class Section:
    """One benchmark's results: markdown for BENCHMARKS.md and summary rows
    (name, measured, target, verdict) for the console table."""

    title: str
    markdown: list[str] = field(default_factory=list)
    summary: list[tuple[str, str, str, str]] = field(default_factory=list)


@dataclass
class Context:
    quick: bool
    scratch: Path
    server: DevServer
    fake: FakeLLMProcess
    client: Client

    def workspace(self, name: str) -> Path:
        path = self.scratch / "workspaces" / name
        path.mkdir(parents=True, exist_ok=True)
        return path


class Environment:
    """Starts and (always) stops the server and the fake; removes the scratch dir."""

    def __init__(self, quick: bool, keep: bool = False) -> None:
        self.quick = quick
        self.keep = keep
        self.scratch = Path(tempfile.mkdtemp(prefix="durable-manus-bench-"))
        self.server = DevServer(self.scratch / "server")
        self.fake: FakeLLMProcess | None = None

    async def __aenter__(self) -> Context:
        try:
            log(f"scratch dir {self.scratch}")
            self.fake = FakeLLMProcess()
            client = await self.server.start()
            log(f"dev server on {self.server.address} (SQLite {self.server.directory / 'temporal.db'}), "
                f"fake LLM on {self.fake.base_url}")
            return Context(self.quick, self.scratch, self.server, self.fake, client)
        except BaseException:
            self.close()
            raise

    async def __aexit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.server.stop()
        if self.fake is not None:
            self.fake.stop()
        if self.keep:
            log(f"kept {self.scratch}")
        else:
            shutil.rmtree(self.scratch, ignore_errors=True)
