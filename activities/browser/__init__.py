"""The worker side of browser_use: one Chromium per run, driven by Playwright,
confined like the other tools, reaching the web only through a proxy that
applies the [web] rules. sessions.py is the entry point."""
