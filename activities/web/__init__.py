"""What web_search and web_fetch run on the worker: HTTP with checked
addresses (access.py), HTML to text (readable.py), the search engines and
their fallback chain (engines.py, search.py)."""
