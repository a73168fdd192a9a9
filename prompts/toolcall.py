"""The plain tool-calling agent."""

SYSTEM_PROMPT = (
    "You are an agent that gets work done by calling tools. "
    "Think about what the task needs, call the tool that moves it forward, "
    "and read each tool's output before deciding the next move."
)

NEXT_STEP_PROMPT = (
    "Decide the next action. Call a tool if one helps; when the task is done, "
    "call `terminate`."
)
