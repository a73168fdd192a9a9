"""Connecting to Temporal: temporalio.envconfig settings, waited for with tenacity."""

from __future__ import annotations

import socket

from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_delay, wait_exponential
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.envconfig import ClientConfig
from temporalio.runtime import Runtime
from temporalio.service import RPCError, RPCStatusCode

from runtime.user_errors import TemporalUnreachable

DEFAULT_PORT = 7233
"""Temporal's frontend port: the embedded server's, and the default address's."""
DEFAULT_ADDRESS = f"127.0.0.1:{DEFAULT_PORT}"
"""Where the embedded server listens, and where a client looks by default."""
CONNECT_WAIT_SECONDS = 30.0
"""How long to keep trying to reach the server before giving up."""


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


async def connect(wait_seconds: float = CONNECT_WAIT_SECONDS, runtime: Runtime | None = None) -> Client:
    """A client with the pydantic data converter, retrying until the server answers."""
    config = connect_config()
    if runtime is not None:
        config["runtime"] = runtime
    try:
        async for attempt in AsyncRetrying(
            stop=stop_after_delay(wait_seconds),
            wait=wait_exponential(multiplier=0.2, max=2.0),
            retry=retry_if_exception_type(RuntimeError),
            reraise=True,
        ):
            with attempt:
                return await Client.connect(**config, data_converter=pydantic_data_converter)
    except RuntimeError as e:
        raise TemporalUnreachable(
            f"cannot reach Temporal at {config['target_host']} (namespace "
            f"{config.get('namespace', 'default')}) after {wait_seconds:.0f} s: {str(e).splitlines()[0]}"
        ) from None
    raise AssertionError("unreachable")


UNREACHABLE = (RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED)
"""Statuses of a call that did not reach a server able to answer it."""


def is_unreachable(error: BaseException) -> bool:
    """True when `error` says the server did not answer at all (refused, gone,
    timed out), as opposed to answering with a refusal."""
    if not isinstance(error, RPCError):
        return False
    # A call's own timeout surfaces as CANCELLED "Timeout expired".
    return error.status in UNREACHABLE or (error.status == RPCStatusCode.CANCELLED and "timeout" in error.message.lower())
