"""Temporal workflows: the agent's run loop and the planning flow."""
