"""Temporal activities: everything the agent does that touches the outside world."""
