"""A Python that keeps its variables between the python_execute calls of a
run, like a notebook's kernel. It runs inside the run's sandbox, started by
the sandbox's server (activities/tools/exec_server.py) on the first such call
and handed each later one; this file is its whole program (`python -c`).

Descriptor 3 is its socket to the server. Each call arrives there as a
datagram (`{"cwd": ...}`) with two descriptors: the call's output pipe and a
pipe holding the code. The code runs in one namespace kept for the life of
this process, with stdout and stderr on the call's pipe and stdin empty;
an exception prints its traceback as a script's would. The reply is the
exit status the same code would have had as a script of its own.

Standard library only. Code run here can reach the socket too: the server
trusts nothing it says beyond "this call is over" (exec_server.py).
"""

import json
import os
import socket
import sys
import traceback

SERVER_FD = 3
MAX_REQUEST_BYTES = 64 * 1024


def _receive(server):
    fds = []
    data, ancillary, _, _ = server.recvmsg(MAX_REQUEST_BYTES, socket.CMSG_SPACE(2 * 4))
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds += [int.from_bytes(payload[i:i + 4], sys.byteorder) for i in range(0, len(payload) - 3, 4)]
    if not data or len(fds) != 2:
        return None
    return json.loads(data), fds


def _read_all(fd):
    chunks: list[bytes] = []
    while True:
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def _exit_status(code):
    """What `sys.exit(code)` would have made a script's exit status."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _run(source, namespace):
    try:
        exec(compile(source, "<python_execute>", "exec"), namespace)
    except SystemExit as e:
        return _exit_status(e.code)
    except BaseException as e:  # noqa: BLE001 - the model's code: its traceback is the observation
        # From the code's first frame on, as a script's traceback would read.
        traceback.print_exception(type(e), e, e.__traceback__.tb_next if e.__traceback__ else None)
        return 1
    return 0


def _output_to(fd):
    """stdout and stderr to `fd`, which is then closed unless it is one of
    them (code that closed 1 or 2 makes the next descriptor take its number)."""
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    if fd > 2:
        os.close(fd)


def main():
    server = socket.socket(fileno=SERVER_FD)
    namespace = {"__name__": "__main__", "__builtins__": __builtins__}
    while True:
        received = _receive(server)
        if received is None:
            return
        request, (out, code_fd) = received
        source = _read_all(code_fd).decode("utf-8", "surrogateescape")
        os.close(code_fd)
        os.chdir(request["cwd"])
        _output_to(out)
        sys.stdout, sys.stderr, sys.stdin = sys.__stdout__, sys.__stderr__, sys.__stdin__  # the last call's code may have replaced them
        status = _run(source, namespace)
        for stream in (sys.stdout, sys.stderr):
            try:
                if stream is not None:
                    stream.flush()
            except (OSError, ValueError):  # the code closed or replaced it
                pass
        _output_to(os.open(os.devnull, os.O_WRONLY))  # the call's pipe ends here: the worker sees its output end
        server.send(json.dumps({"status": status}).encode())


if __name__ == "__main__":  # python -c runs it as __main__; an import does nothing
    main()
