"""create_chat_completion: a structured reply from the model. The response is the
tool's own argument, so it runs in the workflow and has no activity."""

NAME = "create_chat_completion"

SCHEMA = {
    "type": "function",
    "function": {
        "name": NAME,
        "description": "Give a structured reply: the text of the answer for the user.",
        "parameters": {
            "type": "object",
            "properties": {
                "response": {"type": "string", "description": "The reply text."}
            },
            "required": ["response"],
        },
    },
}
