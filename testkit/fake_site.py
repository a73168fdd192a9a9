"""A small web site on 127.0.0.1 for the browser tests: a form, links between
pages, new tabs, a long page, a dropdown, a page whose script changes it, a
page that hangs its renderer, pages that crash it (by filling its memory), and
a page whose script tries to reach a given address and writes down whether it
could.

Built on testkit.fake_web.FakeWeb (a real stdlib HTTP server on a random
port, every request recorded)."""

from __future__ import annotations

import html
import json
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from testkit.fake_web import Answer, FakeWeb, Seen
from testkit.threaded_server import serve_in_thread, stop_serving

MARKER = "Far down marker"
"""Text at the bottom of /long, thousands of pixels below the top."""


def page(title: str, body: str, head: str = "") -> Answer:
    return Answer(body=f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{title}</title>{head}</head>"
                       f"<body>{body}</body></html>")


HOME = page("Fixture home", """
<h1>Fixture home</h1>
<ul>
  <li><a href="/page2">Second page</a></li>
  <li><a href="/form">The form</a></li>
  <li><a href="/long">A long page</a></li>
  <li><a href="/select">A dropdown</a></li>
  <li><a href="/tabs">Tabs</a></li>
</ul>
<p style="display:none"><a href="/hidden">Hidden link</a></p>
""")

SECOND = page("Second page", '<h1>Second page</h1><p>Reached the second page.</p><a href="/">Home</a>')
THIRD = page("Third page", '<h1>Third page</h1><p>Opened by a script.</p>')

FORM = page("The form", """
<form action="/submitted" method="get">
  <label>Query <input type="text" name="q" placeholder="your words"></label>
  <button type="submit">Send</button>
</form>
""")

LONG = page("A long page", f"""
<h1>Top of the long page</h1>
<div style="height: 6000px; background: linear-gradient(white, #ccd)">filler</div>
<p id="marker">{MARKER}</p>
<a href="/">Back home</a>
""")

SELECT = page("A dropdown", """
<label>Colour
  <select id="colour" name="colour"
          onchange="document.getElementById('chosen').textContent = 'Chosen: ' + this.options[this.selectedIndex].text">
    <option value="r">Red</option>
    <option value="g">Green</option>
    <option value="b">Blue</option>
  </select>
</label>
<p id="chosen">Chosen: nothing yet</p>
""")

TABS = page("Tabs", """
<a href="/page2" target="_blank">Second page in a new tab</a>
<button onclick="window.open('/page3')">Open the third page</button>
""")

RETITLED = page("Original title", """
<p id="status">waiting for the script</p>
<script>
  document.title = 'Changed by script';
  document.getElementById('status').textContent = 'changed';
  const button = document.createElement('button');
  button.textContent = 'Added by script';
  document.body.appendChild(button);
</script>
""")

SPIN = page("Spinning page", """
<p>This page stops answering once it has loaded.</p>
<script>window.addEventListener('load', () => setTimeout(() => { for (;;) {} }, 0));</script>
""")

HOG = "const hoard = []; for (;;) hoard.push(new Array(1e6).fill(Math.random()));"
"""Script that fills the renderer's memory until it crashes: quickly under a
small JavaScript heap (--js-flags=--max-old-space-size=64), which the crash
tests give their browser; other browsers must not run it."""

HOG_ON_CLICK = page("Memory hog", f"""
<button onclick="{HOG}">Fill the memory</button>
<input type="text" name="note">
""")

HOG_ON_LOAD = page("Memory hog on load", f"<p>Filling the memory.</p><script>{HOG}</script>")

CALM_LONG = page("Calm long page", """
<h1>Calm long page</h1>
<div style="height: 4000px">filler</div>
""")

HOG_ON_SCROLL = page("Memory hog on scroll", f"""
<h1>Calm long page</h1>
<div style="height: 4000px">filler</div>
<script>window.scrollBy = () => {{ {HOG} }};</script>
""")

DIALOG = page("Dialogs", """
<p>Alerts on load.</p>
<script>alert('hello from the page'); confirm('sure?');</script>
<a href="/page2">Onwards</a>
""")


def probe(seen: Seen) -> Answer:
    """Page JS fetches ?target= and writes what came back into #outcome (and the
    title): "reached: <body>", or "blocked: <error>". A refusal by the browser's
    proxy is an answer without CORS headers, so the script sees "blocked" too."""
    target = seen.param("target") or ""
    return page("Probe", f"""
<p id="outcome">pending</p>
<script>
  const show = (text) => {{ document.getElementById('outcome').textContent = text; document.title = text.split(':')[0]; }};
  fetch({json.dumps(target)}).then((r) => r.text()).then((t) => show('reached: ' + t), (e) => show('blocked: ' + e));
</script>
""")


def submitted(seen: Seen) -> Answer:
    value = seen.param("q") or ""
    return page("Submitted", f"<h1>Thanks</h1><p id='result'>You sent: {html.escape(value)}</p><a href='/form'>Again</a>")


class FakeSite(FakeWeb):
    """The site's pages at fixed paths; start() serves them."""

    def __init__(self) -> None:
        super().__init__()
        pages: dict[str, Answer | Callable[[Seen], Answer]] = {
            "/": HOME,
            "/page2": SECOND,
            "/page3": THIRD,
            "/form": FORM,
            "/submitted": submitted,
            "/long": LONG,
            "/select": SELECT,
            "/tabs": TABS,
            "/title": RETITLED,
            "/spin": SPIN,
            "/dialog": DIALOG,
            "/probe": probe,
            "/hog-on-click": HOG_ON_CLICK,
            "/hog-on-load": HOG_ON_LOAD,
            "/hog-on-scroll": HOG_ON_SCROLL,
            "/hog-on-first-scroll": self._hog_on_first_scroll,
        }
        for path, answer in pages.items():
            # FakeWeb.route wants a running server (it returns the URL).
            self.routes[path] = answer if callable(answer) else (lambda seen, a=answer: a)


    def _hog_on_first_scroll(self, seen: Seen) -> Answer:
        """The first load's scrolling crashes the renderer; a reload is calm."""
        return HOG_ON_SCROLL if len(self.requests_to(seen.path)) == 1 else CALM_LONG


class CountingServer:
    """Answers every request with a short page and counts them: a destination
    the browser must not reach (hits stays 0)."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        counter = self
        self.hits = 0

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                counter.hits += 1
                body = b"<html><title>secret service</title><body>internal data</body></html>"
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Access-Control-Allow-Origin", "*")  # any page's script could read it
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self._server = serve_in_thread(ThreadingHTTPServer((host, 0), Handler))
        self.host, self.port = host, self._server.server_address[1]

    def url(self, path: str = "/") -> str:
        return f"http://{self.host}:{self.port}{path}"

    def stop(self) -> None:
        stop_serving(self._server)
