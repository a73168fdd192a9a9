"""Runs between Playwright and Chromium: Playwright starts it as "the browser
executable" (through the small wrapper script BrowserJail writes), and it
replaces itself with the confined Chromium.

    python3 -I -S jail_exec.py JAIL_JSON [CHROMIUM ARG...]

JAIL_JSON (written by activities/browser/jail.py, in a directory only the
worker can enter) holds the bubblewrap argv up to and including the Chromium
executable, the environment, the seccomp program's file and the descriptor
number the argv names for it, the profile directory and the cgroup files to
join. Playwright's arguments are appended, with its --user-data-dir (a /tmp
path, private and read-only inside the sandbox) replaced by the jail's.

Standard library only, and no imports from the repository: it runs on every
browser launch, as the worker's user, before any confinement exists.
"""

import ctypes
import json
import os
import sys

PR_SET_NO_NEW_PRIVS = 38
USER_DATA_DIR = "--user-data-dir="


def fail(message):
    sys.stderr.write(f"browser jail: {message}\n")
    sys.stderr.flush()
    os._exit(125)


def chromium_arguments(arguments, profile):
    """Playwright's arguments with the profile directory put inside the jail."""
    kept = [a for a in arguments if not a.startswith(USER_DATA_DIR)]
    return [*kept, USER_DATA_DIR + profile]


def main(argv):
    if len(argv) < 2:
        fail("usage: jail_exec.py JAIL_JSON [CHROMIUM ARG...]")
    try:
        with open(argv[1], encoding="utf-8") as f:
            jail = json.load(f)
    except (OSError, ValueError) as e:
        fail(f"cannot read {argv[1]}: {e}")
    command = [*jail["argv"], *chromium_arguments(argv[2:], jail["profile"])]
    if jail.get("seccomp"):
        # bwrap reads the program from the descriptor number its argv names.
        fd = os.open(jail["seccomp"], os.O_RDONLY)
        wanted = jail["seccomp_fd"]
        if fd != wanted:
            os.dup2(fd, wanted)
            os.close(fd)
        os.set_inheritable(wanted, True)
    for procs in jail.get("cgroup_procs", []):
        # Best effort: without the group the browser still has its sandbox.
        try:
            with open(procs, "w") as f:
                f.write(str(os.getpid()))
        except OSError:
            pass
    try:
        with open(jail["pid_file"], "w") as f:
            f.write(str(os.getpid()))
    except (KeyError, OSError):
        pass
    # No exec below this process may gain privileges (setuid files, file capabilities).
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        fail("cannot set no_new_privs")
    try:
        os.execve(command[0], command, jail["env"])
    except OSError as e:
        fail(f"cannot run {command[0]}: {e}")


if __name__ == "__main__":
    main(sys.argv)
