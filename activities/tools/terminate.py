"""terminate: ends the run. Runs in the workflow (no I/O), so it has no activity."""

NAME = "terminate"

SCHEMA = {
    "type": "function",
    "function": {
        "name": NAME,
        "description": (
            "Finish the run. Call it when the task is complete, or when it cannot be "
            "completed and further attempts would not help."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "status": {
                    "type": "string",
                    "enum": ["success", "failure"],
                    "description": "Whether the task was accomplished.",
                },
                "answer": {
                    "type": "string",
                    "description": "The final answer or a short summary for the user.",
                },
            },
            "required": ["status"],
        },
    },
}
