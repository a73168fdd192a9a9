"""Process-level plumbing shared by worker.py, starter.py and the tests:
connecting to Temporal, the embedded server, building the worker."""
