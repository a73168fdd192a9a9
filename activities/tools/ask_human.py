"""ask_human: a question for the user. The workflow publishes it and waits
durably for the `answer` update, so it has no activity."""

NAME = "ask_human"

SCHEMA = {
    "type": "function",
    "function": {
        "name": NAME,
        "description": (
            "Ask the user a question and wait for the reply. Use it only for "
            "information or decisions that only the user can give."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "inquire": {"type": "string", "description": "The question to ask."}
            },
            "required": ["inquire"],
        },
    },
}
