"""MCP servers on the worker: connections kept per server (pool.py, link.py,
stdio.py), and the activities that list and call their tools (activities.py)."""
