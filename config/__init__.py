"""Configuration: the LLM profiles, the workspace root and the task queue."""
