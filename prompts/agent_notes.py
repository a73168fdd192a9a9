"""Notes the run loop itself adds to the conversation."""

STUCK_HINT = (
    "You have given the same reply several times in a row. That approach is not "
    "working: try a different one, use another tool, or call `terminate` if the "
    "task cannot be done."
)

TOOL_REQUIRED_REMINDER = (
    "This agent must act through a tool call. Call one of your tools, or "
    "`terminate` to finish."
)

MAX_STEPS_NOTE = "Stopped after reaching the step limit ({max_steps} steps)."

TOKEN_LIMIT_NOTE = "Stopped: the conversation no longer fits the model's input limit ({detail})."

REPLY_TOO_LARGE_NOTE = "Stopped: the model's reply was too large to use ({detail})."

HUMAN_TIMEOUT_OBSERVATION = (
    "No answer from the user within {seconds} seconds. Continue without it."
)

CONTENT_FILTER_NOTE = (
    "Stopped: the provider's content filter withheld the model's reply "
    "(finish_reason=content_filter)."
)
