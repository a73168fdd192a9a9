"""Prompt text, one module per agent kind.

Each module holds SYSTEM_PROMPT and NEXT_STEP_PROMPT strings whose
`{placeholders}` are filled with `agent_model.prompting.fill`. Nothing else
lives here: no logic, no I/O.
"""
