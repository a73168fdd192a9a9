"""The run page: `python starter.py ui` (docs/run-page.md). A stdlib asyncio
HTTP server on 127.0.0.1 that lists runs, shows one as a transcript with its
steps arriving live, and answers, approves, follows up, cancels and forks
through the same code paths as the CLI."""
