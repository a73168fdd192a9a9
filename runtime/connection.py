"""Connecting to Temporal: temporalio.envconfig settings, waited for, and a failure said in words;
and the one data converter every client and worker uses (pydantic, and the payload codec when
[encryption] names a key file)."""

from __future__ import annotations

import asyncio
import dataclasses
import socket
import time

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import DataConverter, DefaultFailureConverterWithEncodedAttributes
from temporalio.envconfig import ClientConfig
from temporalio.runtime import Runtime
from temporalio.service import RPCError, RPCStatusCode

from agent_model.payload_crypto import EncryptionCodec
from config.encryption_settings import EncryptionSettings
from runtime.user_errors import TemporalUnreachable

DEFAULT_PORT = 7233
"""Temporal's frontend port: the embedded server's, and the default address's."""
DEFAULT_ADDRESS = f"127.0.0.1:{DEFAULT_PORT}"
"""Where the embedded server listens, and where a client looks by default."""
CONNECT_WAIT_SECONDS = 30.0
"""How long to keep trying to reach the server before giving up."""


def data_converter(encryption: EncryptionSettings) -> DataConverter:
    """Pydantic payloads; with a key file, every payload encrypted (its key
    file read now: a bad one is a ConfigError line before anything starts),
    and failures' messages and stack traces moved into an encrypted payload
    too, so an error that quotes a task or a page is not left in the clear."""
    ring = encryption.key_ring()
    if ring is None:
        return pydantic_data_converter
    return dataclasses.replace(
        pydantic_data_converter,
        payload_codec=EncryptionCodec(ring),
        failure_converter_class=DefaultFailureConverterWithEncodedAttributes,
    )


def connect_config() -> dict:
    """Client.connect keyword arguments from TEMPORAL_* variables and the
    Temporal config file (address, namespace, API key, TLS)."""
    config = dict(ClientConfig.load_client_connect_config())
    config.setdefault("target_host", DEFAULT_ADDRESS)
    return config


def address_is_explicit() -> bool:
    """True when TEMPORAL_ADDRESS or a Temporal config profile names a server."""
    return "target_host" in ClientConfig.load_client_connect_config()


def port_answers(address: str, timeout: float = 0.5) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout):
            return True
    except (OSError, ValueError):
        return False


async def connect(
    converter: DataConverter, wait_seconds: float = CONNECT_WAIT_SECONDS, runtime: Runtime | None = None
) -> Client:
    """A client with `converter` (data_converter's), retrying until the server
    answers or `wait_seconds` have passed (each attempt is bounded by what
    is left: one attempt at a listener that never replies would take 30 s)."""
    config = connect_config()
    if runtime is not None:
        config["runtime"] = runtime
    began = time.monotonic()
    pause = 0.2
    while True:
        left = wait_seconds - (time.monotonic() - began)
        attempt = asyncio.ensure_future(Client.connect(**config, data_converter=converter))
        try:
            # Shielded, not cancelled: the core's connect is left to end on its own.
            return await asyncio.wait_for(asyncio.shield(attempt), max(left, 0.5))
        except asyncio.TimeoutError:
            attempt.add_done_callback(_ignore_outcome)
            cause = "no answer (something accepts connections there but does not reply as a Temporal server)"
        except RuntimeError as e:
            cause = connect_failure(str(e))
        waited = time.monotonic() - began
        if waited + pause > wait_seconds:
            raise TemporalUnreachable(
                f"cannot reach Temporal at {config['target_host']} (namespace "
                f"{config.get('namespace', 'default')}) after {waited:.0f} s: {cause}"
            ) from None
        await asyncio.sleep(pause)
        pause = min(pause * 2, 2.0)


def _ignore_outcome(attempt: asyncio.Future) -> None:
    """An abandoned attempt's late failure is not news ("exception never retrieved")."""
    if not attempt.cancelled():
        attempt.exception()


def connect_failure(message: str) -> str:
    """A failed connect in words: the core's text is a nested tonic error."""
    if "Connection refused" in message:
        return "connection refused (nothing listens there)"
    if "after connection" in message:
        if "Timeout" in message:
            return "no answer (something accepts connections there but does not reply as a Temporal server)"
        return "something listens there but does not answer as a Temporal server"
    if "dns error" in message or "failed to lookup address" in message:
        return "the host name does not resolve"
    if "Timeout" in message or "timed out" in message:
        return "no answer (timed out)"
    first = message.strip().splitlines()[0] if message.strip() else "unknown error"
    return first.removeprefix("Failed client connect: ")[:300]


UNREACHABLE = (RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED)
"""Statuses of a call that did not reach a server able to answer it."""


def is_unreachable(error: BaseException) -> bool:
    """True when `error` says the server did not answer at all (refused, gone,
    timed out), as opposed to answering with a refusal."""
    if not isinstance(error, RPCError):
        return False
    # A call's own timeout surfaces as CANCELLED "Timeout expired".
    return error.status in UNREACHABLE or (error.status == RPCStatusCode.CANCELLED and "timeout" in error.message.lower())
