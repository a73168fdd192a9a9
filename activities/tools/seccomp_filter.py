"""A seccomp filter for tool processes, handed to bubblewrap (`--seccomp FD`).

Without capabilities the tools cannot mount, trace the worker or change user;
what is left is the kernel's own attack surface. The filter refuses the
system calls that most kernel privilege escalations start from and that no
ordinary program needs: new user namespaces (a root worker's bwrap cannot
forbid them with --disable-userns), io_uring, eBPF, userfaultfd, perf events
and the kernel keyring.

The program is classic BPF, assembled here: it checks the architecture (and,
on x86-64, refuses the x32 ABI, whose numbers would bypass the checks), then
the system call number, then the flags of clone/unshare.
"""

from __future__ import annotations

import errno
import os
import platform
import struct

CLONE_NEWUSER = 0x10000000

_ARCH = {
    # machine: (AUDIT_ARCH value, {name: number})
    "x86_64": (
        0xC000003E,
        {
            "clone": 56, "unshare": 272, "clone3": 435,
            "keyctl": 250, "add_key": 248, "request_key": 249,
            "bpf": 321, "userfaultfd": 323, "perf_event_open": 298,
            "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
        },
    ),
    "aarch64": (
        0xC00000B7,
        {
            "clone": 220, "unshare": 97, "clone3": 435,
            "keyctl": 219, "add_key": 217, "request_key": 218,
            "bpf": 280, "userfaultfd": 282, "perf_event_open": 241,
            "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
        },
    ),
}

REFUSED = ("keyctl", "add_key", "request_key", "bpf", "userfaultfd", "perf_event_open",
           "io_uring_setup", "io_uring_enter", "io_uring_register")

_LD_W_ABS = 0x20
_JEQ = 0x15
_JGE = 0x35
_JSET = 0x45
_RET = 0x06
_ALLOW = 0x7FFF0000
_ERRNO = 0x00050000
_X32_BIT = 0x40000000
_OFFSET_NR, _OFFSET_ARCH, _OFFSET_ARG0 = 0, 4, 16


def supported() -> bool:
    return platform.machine() in _ARCH


def program() -> bytes:
    """The filter for this machine's architecture, as bwrap reads it."""
    arch, numbers = _ARCH[platform.machine()]
    code: list[tuple] = []  # (opcode, k, true label or None, false label or None)
    code.append((_LD_W_ABS, _OFFSET_ARCH, None, None))
    code.append((_JEQ, arch, None, "deny"))  # a foreign ABI: refuse everything
    code.append((_LD_W_ABS, _OFFSET_NR, None, None))
    if arch == 0xC000003E:
        code.append((_JGE, _X32_BIT, "deny", None))
    code.append((_JEQ, numbers["clone3"], "nosys", None))  # flags hidden in memory: libc falls back to clone
    code.append((_JEQ, numbers["clone"], "flags", None))
    code.append((_JEQ, numbers["unshare"], "flags", None))
    for name in REFUSED:
        code.append((_JEQ, numbers[name], "deny", None))
    code.append((_RET, _ALLOW, None, None))
    labels = {"flags": len(code)}
    code.append((_LD_W_ABS, _OFFSET_ARG0, None, None))
    code.append((_JSET, CLONE_NEWUSER, "deny", None))
    code.append((_RET, _ALLOW, None, None))
    labels["deny"] = len(code)
    code.append((_RET, _ERRNO | errno.EPERM, None, None))
    labels["nosys"] = len(code)
    code.append((_RET, _ERRNO | errno.ENOSYS, None, None))

    def offset(index: int, label: str | None) -> int:
        return 0 if label is None else labels[label] - index - 1

    return b"".join(
        struct.pack("=HBBI", op, offset(i, true), offset(i, false), k)
        for i, (op, k, true, false) in enumerate(code)
    )


def program_fd() -> int:
    """A fresh descriptor positioned at the start of the program (bwrap reads
    it to the end, so every call needs its own)."""
    fd = os.memfd_create("durable-manus-seccomp")  # close-on-exec: passed on explicitly
    os.write(fd, program())
    os.lseek(fd, 0, os.SEEK_SET)
    return fd
