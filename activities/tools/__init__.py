"""Tool activities, one module per tool the model can call.

Each module exposes NAME (the tool name the model sees), SCHEMA (its OpenAI
function-tool definition), OPTIONS (keyword arguments for
workflow.execute_activity) and one class whose `run` method is the activity.
"""
