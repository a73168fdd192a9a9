"""One browser's confinement: a private directory, its checking proxy, and the
executable Playwright launches in place of Chromium.

Layout (the directory is the worker's, mode 0700; nothing in it but `home`
is visible inside the sandbox):

    dm-browser-XXXX/
        egress.sock     the proxy (bind-mounted into the sandbox, where the
                        egress forwarder serves it on 127.0.0.1:3128)
        seccomp.bpf     the tool seccomp program, opened by jail_exec.py
        jail.json       argv, environment and files for jail_exec.py
        chromium        the wrapper script Playwright runs as "the browser"
        bwrap.pid       written by jail_exec.py: the process to kill if the
                        browser stops answering
        home/           the browser's HOME, profile, caches and TMPDIR; the
                        only directory the sandbox can write (owned by the
                        tool user when the worker is root)

With the sandbox in mode "none" (the operator's choice) the same wrapper
starts Chromium unconfined, and the proxy listens on the worker's loopback.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import shlex
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from activities.process_liveness import is_alive
from activities.tools import seccomp_filter
from activities.tools.egress_proxy import DestinationCheck, EgressProxy
from activities.tools.sandbox import EGRESS_PORT, ToolSandbox

log = logging.getLogger(__name__)

JAIL_EXEC = Path(__file__).with_name("jail_exec.py")
SECCOMP_FD = 10
"""Descriptor number the wrapper puts the seccomp program on for bwrap
(above Playwright's pipes 3 and 4)."""

BROWSER_MAX_PIDS = 1024
"""Threads of one browser (the cgroup counts threads): Chromium runs ~110 with
one tab and ~12 more per renderer, and sites in frames get renderers too."""

DEBIAN_CHROMIUM = "/usr/lib/chromium/chromium"
"""The real binary; /usr/bin/chromium is a shell wrapper that adds flags."""
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")

CONFINEMENT_ARGS = (
    "--no-sandbox",  # bwrap is the sandbox; Chromium's own needs user namespaces, which the seccomp filter refuses
    "--disable-gpu",
    "--disable-dev-shm-usage",  # the sandbox's /dev/shm is a bare directory
    "--disable-quic",  # UDP would not pass the HTTP proxy
    "--proxy-bypass-list=<-loopback>",  # loopback too goes through the proxy's check
    "--force-webrtc-ip-handling-policy=disable_non_proxied_udp",
    "--dns-prefetch-disable",
    "--no-pings",
)


def find_chromium(configured: str | None) -> str | None:
    """The Chromium executable: the configured one, Debian's, or the first on PATH."""
    if configured:
        return configured if os.access(configured, os.X_OK) else None
    if os.access(DEBIAN_CHROMIUM, os.X_OK):
        return DEBIAN_CHROMIUM
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


MAX_BASE_CHARS = 32
"""Longest temporary directory the jail goes in (else /tmp): Chromium's
singleton socket, <jail>/home/tmp/org.chromium.Chromium.XXXXXX/SingletonSocket,
must fit in a UNIX socket address (107 bytes), or Chromium will not start."""


def _base_dir() -> str:
    base = tempfile.gettempdir()
    return base if len(base) <= MAX_BASE_CHARS else "/tmp"


JAIL_PREFIX = "dm-browser-"
STALE_SECONDS = 3600.0
"""A jail directory without a pid file this old was left by a launch that
died (a launch takes seconds)."""


def sweep_stale_jails() -> int:
    """Remove the jail directories of browsers that are gone (a worker killed
    before it could clean up); returns how many. A directory is left alone
    unless it is this user's and its browser's process no longer exists."""
    removed = 0
    base = Path(_base_dir())
    with contextlib.suppress(OSError):
        for entry in base.iterdir():
            if not entry.name.startswith(JAIL_PREFIX) or entry.is_symlink():
                continue
            try:
                info = entry.stat()
            except OSError:
                continue
            if info.st_uid != os.geteuid():
                continue
            try:
                pid = int((entry / "bwrap.pid").read_text())
            except FileNotFoundError:
                if time.time() - info.st_mtime < STALE_SECONDS:
                    continue
                pid = None
            except (OSError, ValueError):
                continue
            if pid is not None and is_alive(pid):
                continue
            shutil.rmtree(entry, ignore_errors=True)
            removed += 1
    return removed



@dataclass(frozen=True)
class LaunchPlan:
    """What Playwright's chromium.launch gets."""

    executable: str
    args: list[str]
    env: dict[str, str]


class BrowserJail:
    """The confinement of one browser; open() before the launch, close() after."""

    def __init__(
        self, sandbox: ToolSandbox, chromium: str, check: DestinationCheck, extra_args: Sequence[str] = ()
    ) -> None:
        if sandbox.mode not in ("bwrap", "none"):
            raise RuntimeError(f"browser sandbox unavailable: {sandbox.problem}")
        self.sandbox, self.chromium, self.extra_args = sandbox, chromium, list(extra_args)
        self.proxy = EgressProxy(check=check)
        self.private: Path | None = None
        self._cleanup = contextlib.ExitStack()

    @property
    def home(self) -> Path:
        assert self.private is not None
        return self.private / "home"

    @property
    def profile(self) -> Path:
        return self.home / "profile"

    async def open(self) -> LaunchPlan:
        try:
            return await self._open()
        except BaseException:
            await self.close()
            raise

    async def _open(self) -> LaunchPlan:
        self.private = Path(tempfile.mkdtemp(prefix=JAIL_PREFIX, dir=_base_dir()))  # mode 0700: the worker's alone
        for directory in (self.home, self.profile, self.home / "tmp", self.home / ".config", self.home / ".cache"):
            directory.mkdir(mode=0o700)
            if self.sandbox.run_as is not None and self.sandbox.mode == "bwrap":
                os.chown(directory, *self.sandbox.run_as, follow_symlinks=False)
        # bwrap enters `home` as root without CAP_DAC_OVERRIDE, before it drops
        # to the tool user; the private directory above keeps others out.
        self.home.chmod(0o711)
        # The operator's arguments first: Chromium takes the last of a repeated
        # switch, so they cannot undo the confinement's.
        args = [*self.extra_args, *CONFINEMENT_ARGS]
        jail: dict = {"profile": str(self.profile), "pid_file": str(self.private / "bwrap.pid")}
        if self.sandbox.mode == "bwrap":
            socket = self.private / "egress.sock"
            await self.proxy.start(socket)
            args.append(f"--proxy-server=http://127.0.0.1:{EGRESS_PORT}")  # the forwarder, inside the sandbox
            seccomp = self.private / "seccomp.bpf"
            seccomp.write_bytes(seccomp_filter.program())
            jail["seccomp"], jail["seccomp_fd"] = str(seccomp), SECCOMP_FD
            jail["argv"] = self.sandbox.command(
                [self.chromium, *args], run_dir=self.home, cwd=self.home, seccomp_fd=SECCOMP_FD, egress_socket=socket
            )
            group = self._cleanup.enter_context(self._call_group())
            jail["cgroup_procs"] = group.procs_files if group is not None else []
        else:
            port = await self.proxy.start_tcp("127.0.0.1")
            jail["argv"] = [self.chromium, *args, f"--proxy-server=http://127.0.0.1:{port}"]
        jail["env"] = self._environment()
        (self.private / "jail.json").write_text(json.dumps(jail))
        wrapper = self.private / "chromium"
        wrapper.write_text(
            "#!/bin/sh\n"
            f"exec {shlex.quote(sys.executable)} -I -S {shlex.quote(str(JAIL_EXEC))} "
            f"{shlex.quote(str(self.private / 'jail.json'))} \"$@\"\n"
        )
        wrapper.chmod(0o700)
        # Playwright's own environment would carry the worker's; the wrapper gets none of it.
        return LaunchPlan(executable=str(wrapper), args=[], env={"PATH": "/usr/bin:/bin"})

    def _call_group(self) -> contextlib.AbstractContextManager:
        """The tool cgroup (memory cap, kill-all on close) with room for a browser's threads."""
        cgroups = self.sandbox.cgroups
        if cgroups is None:
            return contextlib.nullcontext(None)
        return dataclasses.replace(cgroups, max_pids=max(cgroups.max_pids, BROWSER_MAX_PIDS)).call()

    def _environment(self) -> dict[str, str]:
        """Built from scratch (sandbox.environment): no worker secret reaches the browser."""
        env = self.sandbox.environment(self.home)
        env.update({
            "HOME": str(self.home),
            "TMPDIR": str(self.home / "tmp"),  # the sandbox's /tmp is not the tool user's
            "XDG_CONFIG_HOME": str(self.home / ".config"),
            "XDG_CACHE_HOME": str(self.home / ".cache"),
        })
        return env

    @property
    def pid(self) -> int | None:
        """The jail's outermost process (bwrap, or Chromium in mode "none")."""
        if self.private is None:
            return None
        try:
            return int((self.private / "bwrap.pid").read_text())
        except (OSError, ValueError):
            return None

    def kill(self) -> None:
        """Stop the browser without asking it: bwrap's death takes the whole
        sandbox (--die-with-parent, its own pid namespace) with it."""
        pid = self.pid
        if pid is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)

    async def close(self) -> None:
        try:
            await self.proxy.close()
        finally:
            self._cleanup.close()  # the cgroup: every process still in it is killed
            if self.private is not None:
                shutil.rmtree(self.private, ignore_errors=True)
                self.private = None
