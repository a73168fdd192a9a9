"""The ApplicationError types of the project, declared once.

An activity raises one of these as `ApplicationError(..., type=...)`; retry
policies list some as non-retryable and the workflows branch on others. Pure
constants, so workflow code imports them. A type's name is part of the
history (failures carry it), so a name never changes once released.
"""

from __future__ import annotations

# The think activity (activities/llm*.py).
LLM_TIMEOUT_ERROR = "LLMTimeout"
"""The model's endpoint did not answer within the request timeout; retried."""
LLM_CONNECTION_ERROR = "LLMConnectionError"
"""The endpoint could not be reached; retried."""
LLM_UNAVAILABLE_ERROR = "LLMUnavailable"
"""A status worth asking again (408, 409, 429, 5xx, or the server said so); retried, after Retry-After."""
LLM_REQUEST_REJECTED_ERROR = "LLMRequestRejected"
"""Any other 4xx (auth, bad request): the same request gets the same answer, never retried."""
LLM_INVALID_RESPONSE_ERROR = "LLMInvalidResponse"
"""The body was not a JSON object; retried."""
LLM_EMPTY_RESPONSE_ERROR = "LLMEmptyResponse"
"""The reply had no choices; retried."""
LLM_ERROR = "LLMError"
"""Any other failure of the SDK; retried."""
REPLY_TOO_LARGE_ERROR = "LLMReplyTooLarge"
"""The reply is over the size a history can hold; never retried (it would cost as much again)."""
UNKNOWN_LLM_PROFILE_ERROR = "UnknownLLMProfile"
"""The run names an LLM profile the worker's config lacks; never retried."""
TOKEN_LIMIT_ERROR = "TokenLimitExceeded"
"""The request is over the profile's max_input_tokens; the run finishes gracefully."""
CONTEXT_MISSING_ERROR = "ThinkContextMissing"
"""The worker lacks the context the request refers to; the workflow resends it whole."""

# Tools and the run's directory.
BAD_TOOL_ARGUMENTS_ERROR = "BadToolArguments"
"""The model's arguments are malformed: an observation for the model, never retried."""
INVALID_WORKSPACE_NAME_ERROR = "InvalidWorkspaceName"
"""A run directory name that is not safe; a bug in the caller, never retried."""
QUESTION_CLOSED_ERROR = "QuestionClosed"
"""An answer to an ask_human question that is no longer open (the update is refused)."""
APPROVAL_CLOSED_ERROR = "ApprovalClosed"
"""A decision on a gated call that was closed or is not the one waiting."""

# MCP.
MCP_NOT_INSTALLED_ERROR = "McpNotInstalled"
"""The worker has no MCP client library; never retried."""
MCP_UNKNOWN_SERVER_ERROR = "McpUnknownServer"
"""The run names an MCP server the worker's mcp.json lacks; never retried."""
MCP_UNAVAILABLE_ERROR = "McpUnavailable"
"""The server could not be reached or failed mid-call; retried."""

# A run's own ending (workflows/run_failure.py).
TASK_NOT_DONE_ERROR = "TaskNotDone"
"""A run or flow that ended without doing its task fails with this; its details hold the whole result."""
