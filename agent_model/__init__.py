"""Pure data and deterministic logic of the agent. No I/O: safe inside workflows."""
