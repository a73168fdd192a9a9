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

EMPTY_REPLY_REMINDER = (
    "Your last reply was empty: it had no text and no tool call. Continue with "
    "the task: call one of your tools, or give your answer if you are done."
)

EMPTY_REPLY_STEP_NOTE = "empty reply (no text, no tool call); the model was reminded"

EMPTY_REPLY_NOTE = (
    "Stopped: the model replied with neither text nor a tool call, again after "
    "a reminder (finish_reason={finish_reason})."
)

HUMAN_TIMEOUT_REASON = "no answer came within {seconds} seconds"

CANCELLED_NOTE = "the run was cancelled"

NOT_RUN_CANCELLED = "Not run: the run was cancelled."

TOOL_CANCELLED_OBSERVATION = "Cancelled: the run was cancelled while {tool} ran; the call was stopped."

LOST_CALL_OBSERVATION = (
    "Error: {tool} did not finish: the worker running it stopped answering {times} times in a row "
    "(it may have crashed, or lost its connection), and the call was stopped each time. What it "
    "did before each stop (files written) may be there; running it again may do it once more."
)

HUMAN_CANCELLED_OBSERVATION = "Not answered: the run was cancelled while waiting for the user's answer."

TOO_MANY_CALLS_REMINDER = (
    "Your last reply asked for {asked} tool calls; only the first {kept} were kept and run. "
    "Ask for fewer calls per reply."
)
TOO_MANY_CALLS_STEP_NOTE = "{dropped} tool call(s) beyond the first {kept} of the reply were dropped"

SCREENSHOT_NOTE = "Screenshot of the browser after the action above."
TOOL_IMAGE_NOTE = "Image produced by the tool above."
TOOL_IMAGE_FILE_NOTE = "The image {path} that the tool above wrote."

APPROVAL_REJECTED_OBSERVATION = "The user rejected this call: {reason}"
APPROVAL_NO_REASON = "no reason given"
APPROVAL_TIMEOUT_REASON = "no decision came within {seconds} seconds"
APPROVAL_TIMEOUT_REJECTED = (
    "Not run: this call needed the user's approval and no decision came within {seconds} seconds."
)
APPROVAL_EDITED_NOTE = "The user changed the arguments of call {call_id} ({tool}) before it ran; it ran with: {arguments}"
APPROVAL_CANCELLED_OBSERVATION = "Not run: the run was cancelled while the call waited for approval."
