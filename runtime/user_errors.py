"""The failures whose message is already one line for the user.

Declared here, apart from the modules that raise them, so that the command
line can name them without importing what raises them (the worker stack)."""

from __future__ import annotations

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


USER_ERRORS = (
    UsageError, UnknownAgent, ConfigError, TemporalUnreachable, FileNotFoundError, RunControlError, WorkerUnavailable,
    RunEnded,
)
"""The starter's exit 2 (RunEnded: 1), an MCP tool's error line."""
