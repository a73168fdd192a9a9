"""Which Temporal server a starter command talks to, and when the embedded one
is started.

The configured server (TEMPORAL_ADDRESS or a Temporal config profile) is used
as it is. Without one, the address is the embedded server's; only the commands
that start or follow a run (run, attach, rewind) start that server when nothing
answers there. A command on runs that exist (list, show, result, answer,
cancel) never does: a server that is not running holds no run to read, so it
says so in one line instead.
"""

from __future__ import annotations

import time
from typing import TextIO

from temporalio.client import Client
from temporalio.converter import DataConverter

from config.encryption_settings import EncryptionSettings
from runtime.cli import cli_runtime
from runtime.connection import DEFAULT_ADDRESS, address_is_explicit, connect, connect_config, data_converter
from runtime.connection import port_answers
from runtime.embedded_server import configured_ui_port, data_dir, start_embedded_server
from runtime.server_start import wait_until_answering
from runtime.user_errors import TemporalUnreachable, UsageError

EXISTING_SERVER_WAIT = 5.0
"""Seconds to wait for a server that should already be up."""
NEW_SERVER_WAIT = 30.0
"""Seconds to wait for the embedded server just started."""
START_HINT = "`python starter.py server` starts the embedded one (so does `python starter.py run ...`)"


def embedded_server_missing() -> bool:
    """True when no server is configured and nothing answers at the embedded server's address."""
    return not address_is_explicit() and not port_answers(DEFAULT_ADDRESS)


def starting_line(directory) -> str:
    return f"starting the embedded Temporal server (data in {directory})..."


def started_line(directory, seconds: float) -> str:
    return (
        f"Started the embedded Temporal server in {seconds:.1f} s (data in {directory}, Web UI "
        f"http://127.0.0.1:{configured_ui_port()}); it keeps running after this command."
    )


FOREIGN_HINT = (
    f"stop the program that holds {DEFAULT_ADDRESS} (the embedded server's address), "
    "or set TEMPORAL_ADDRESS to your Temporal server"
)


async def start_and_connect(out: TextIO, converter: DataConverter, encryption: EncryptionSettings) -> Client:
    """Start the embedded server, and say so once it answers (never before).
    With encryption on, its Web UI is pointed at the codec server."""
    print(starting_line(data_dir()), file=out, flush=True)
    began = time.monotonic()
    start = start_embedded_server(ui_codec_endpoint=encryption.ui_codec_endpoint)
    await wait_until_answering(start, DEFAULT_ADDRESS, NEW_SERVER_WAIT)
    client = await connect(
        converter, wait_seconds=max(1.0, NEW_SERVER_WAIT - (time.monotonic() - began)), runtime=cli_runtime()
    )
    print(started_line(start.directory, time.monotonic() - began), file=out, flush=True)
    return client


async def connect_for(command: str, may_start_server: bool, out: TextIO, encryption: EncryptionSettings) -> Client:
    """A client for `command`, with the data converter of `encryption` (its
    key file read first, so a bad one starts nothing); the embedded server is
    started first only when `may_start_server` and it is needed."""
    converter = data_converter(encryption)
    if embedded_server_missing():
        if not may_start_server:
            raise TemporalUnreachable(
                f"no Temporal server answers at {DEFAULT_ADDRESS} and `{command}` never starts one; {START_HINT}, "
                "or set TEMPORAL_ADDRESS to another server"
            )
        return await start_and_connect(out, converter, encryption)
    try:
        return await connect(converter, wait_seconds=EXISTING_SERVER_WAIT, runtime=cli_runtime())
    except TemporalUnreachable as e:
        hint = f"; {FOREIGN_HINT}" if not address_is_explicit() else ""
        never = f"; `{command}` never starts a server" if not may_start_server else ""
        raise TemporalUnreachable(f"{e}{hint}{never}") from None


async def start_server(out: TextIO, encryption: EncryptionSettings) -> int:
    """`python starter.py server`: start the embedded server, detached, unless it already answers."""
    configured = connect_config()["target_host"]
    if address_is_explicit() and configured != DEFAULT_ADDRESS:
        raise UsageError(
            f"the configured Temporal server is {configured} (TEMPORAL_ADDRESS or a Temporal config profile); "
            f"`server` only starts the embedded one at {DEFAULT_ADDRESS}: unset TEMPORAL_ADDRESS to use it"
        )
    converter = data_converter(encryption)
    if port_answers(DEFAULT_ADDRESS):
        try:
            await connect(converter, wait_seconds=EXISTING_SERVER_WAIT, runtime=cli_runtime())
        except TemporalUnreachable as e:
            raise TemporalUnreachable(f"{e}; {FOREIGN_HINT}") from None
        print(f"a Temporal server already answers at {DEFAULT_ADDRESS}", file=out)
        return 0
    await start_and_connect(out, converter, encryption)

    print(f"It listens on {DEFAULT_ADDRESS}; stop it with: kill $(cat {data_dir()}/temporal.pid)", file=out)
    return 0
