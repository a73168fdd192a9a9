"""One line for a failed action of a long-lived server (the MCP server's
tools, the run page's forms): the user's error as it is, Temporal's answer
named, anything else logged whole and told in one line."""

from __future__ import annotations

import logging

from temporalio.service import RPCError

from runtime.connection import connect_config, is_unreachable
from runtime.run_control import one_line
from runtime.user_errors import USER_ERRORS, encrypted_without_key

log = logging.getLogger(__name__)


def failure_line(error: Exception, where: str) -> str:
    """`where` names the server in the log line of an unexpected failure."""
    error = encrypted_without_key(error) or error
    if isinstance(error, USER_ERRORS):
        return one_line(str(error))
    if isinstance(error, RPCError):
        if is_unreachable(error):
            return f"cannot reach the Temporal server at {connect_config()['target_host']} ({one_line(error.message)})"
        return f"Temporal refused the request: {one_line(error.message)}"
    log.error("unexpected failure in %s", where, exc_info=error)
    return f"internal error: {type(error).__name__}: {one_line(str(error))}"
