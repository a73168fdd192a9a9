"""The failures whose message is already one line for the user.

Declared here, apart from the modules that raise them, so that the command
line can name them without importing what raises them (the worker stack)."""

from __future__ import annotations

from agent_model.payload_crypto import PayloadUnreadable
from agent_model.profiles import UnknownAgent
from config.settings import ConfigError


class UsageError(Exception):
    """Bad input to a command; the message is one line for the user (exit 2)."""


class TemporalUnreachable(Exception):
    """No Temporal server answered; the message is one line for the user."""


class WorkerUnavailable(Exception):
    """This process cannot run the worker a command needs (e.g. no tool sandbox)."""


class RunControlError(Exception):
    """A request about a run that cannot be honoured; one line for the user."""


class RunEnded(Exception):
    """The run closed without a result (failed, terminated, timed out, cancelled);
    the message is one line for the user, with the reason."""


class EncryptedWithoutKey(Exception):
    """A run's payloads are encrypted and this process has no key file."""

    def __init__(self) -> None:
        super().__init__(
            "this run's payloads are encrypted and this command has no key file: set [encryption] key_file "
            "(or DURABLE_MANUS_ENCRYPTION_KEY_FILE) to the key file its workers use"
        )


def encrypted_without_key(error: BaseException) -> EncryptedWithoutKey | None:
    """The converter's refusal of an encrypted payload when no codec is set
    (a KeyError naming the encoding), as one line for the user."""
    if isinstance(error, KeyError) and "binary/encrypted" in str(error):
        return EncryptedWithoutKey()
    return None


USER_ERRORS = (
    UsageError, UnknownAgent, ConfigError, TemporalUnreachable, FileNotFoundError, RunControlError, WorkerUnavailable,
    RunEnded, PayloadUnreadable, EncryptedWithoutKey,
)
"""The starter's exit 2 (RunEnded: 1), an MCP tool's error line."""
