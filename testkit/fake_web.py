"""A fake web on 127.0.0.1 for the web_search and web_fetch tests: pages and
search engines answering with realistic result pages and JSON, each route a
function of the request, every request recorded."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

from testkit.threaded_server import serve_in_thread, stop_serving


@dataclass
class Seen:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes

    def param(self, name: str) -> str | None:
        values = self.query.get(name)
        return values[0] if values else None


@dataclass
class Answer:
    status: int = 200
    body: bytes | str = b""
    content_type: str = "text/html; charset=utf-8"
    headers: dict[str, str] = field(default_factory=dict)


Route = Callable[[Seen], Answer]


class FakeWeb:
    def __init__(self) -> None:
        self.routes: dict[str, Route] = {}
        self.seen: list[Seen] = []
        self._server: ThreadingHTTPServer | None = None

    def route(self, path: str, answer: Answer | Route) -> str:
        """Serve `answer` at `path`; returns the path's URL."""
        self.routes[path] = answer if callable(answer) else (lambda seen, a=answer: a)
        return self.url(path)

    @property
    def port(self) -> int:
        assert self._server is not None
        return self._server.server_address[1]

    def url(self, path: str = "/") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    @property
    def origin(self) -> str:
        """The server's origin, as `[web] allow` opens it."""
        return f"http://127.0.0.1:{self.port}"

    def requests_to(self, path: str) -> list[Seen]:
        return [s for s in self.seen if s.path == path]

    def start(self) -> FakeWeb:
        web = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _answer(self) -> None:
                parts = urlsplit(self.path)
                length = int(self.headers.get("content-length") or 0)
                seen = Seen(self.command, parts.path, parse_qs(parts.query), {k.lower(): v for k, v in self.headers.items()},
                            self.rfile.read(length) if length else b"")
                web.seen.append(seen)
                route = web.routes.get(parts.path)
                answer = route(seen) if route else Answer(404, "<html><body><h1>Not found</h1></body></html>")
                body = answer.body.encode() if isinstance(answer.body, str) else answer.body
                self.send_response(answer.status)
                self.send_header("Content-Type", answer.content_type)
                self.send_header("Content-Length", str(len(body)))
                for name, value in answer.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            do_GET = do_POST = do_HEAD = _answer

        class Server(ThreadingHTTPServer):
            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # a client that stops reading (the byte cap) is expected

        self._server = serve_in_thread(Server(("127.0.0.1", 0), Handler))
        return self

    def stop(self) -> None:
        stop_serving(self._server)


# --- realistic engine answers ------------------------------------------------


def duckduckgo_page(results: list[tuple[str, str, str]]) -> str:
    """html.duckduckgo.com/html/: results in div.result, links through /l/?uddg=, an ad first."""
    items = [
        '<div class="result results_links results_links_deep result--ad"><div class="links_main result__body">'
        '<h2 class="result__title"><a rel="nofollow" class="result__a" href="https://duckduckgo.com/y.js?ad_domain=ads.example">'
        'An advert</a></h2><a class="result__snippet" href="#">Buy now</a></div></div>'
    ]
    for title, url, snippet in results:
        items.append(
            '<div class="result results_links results_links_deep web-result "><div class="links_main links_deep result__body">'
            f'<h2 class="result__title"><a rel="nofollow" class="result__a" href="//duckduckgo.com/l/?uddg={quote(url, safe="")}&amp;rut=abc123">{title}</a></h2>'
            f'<div class="result__extras"><div class="result__extras__url"><a class="result__url" href="#">{url}</a></div></div>'
            f'<a class="result__snippet" href="//duckduckgo.com/l/?uddg={quote(url, safe="")}">{snippet}</a>'
            '<div class="clear"></div></div></div>'
        )
    return (
        '<!DOCTYPE html><html><head><meta charset="utf-8"><title>query at DuckDuckGo</title>'
        '<script>var x = "<div class=result>";</script></head><body><div id="links" class="results">'
        + "".join(items) + "</div></body></html>"
    )


DUCKDUCKGO_CHALLENGE = (
    '<!DOCTYPE html><html><head><title>DuckDuckGo</title></head><body><form id="challenge-form" action="//duckduckgo.com/anomaly.js">'
    '<div class="anomaly-modal__title">Unfortunately, bots use DuckDuckGo too.</div>'
    '<div class="anomaly-modal__description">Please complete the following challenge.</div></form></body></html>'
)


def google_page(results: list[tuple[str, str, str]]) -> str:
    blocks = "".join(
        f'<div class="MjjYud"><div class="g"><div class="yuRUbf"><a href="/url?q={quote(url, safe="")}&amp;sa=U&amp;ved=2ah">'
        f'<br><h3 class="LC20lb">{title}</h3><div class="byrV5b"><cite>{url}</cite></div></a></div>'
        f'<div class="VwiC3b yXK7lf"><span>{snippet}</span></div></div></div>'
        for title, url, snippet in results
    )
    return f'<!doctype html><html><head><title>query - Google Search</title><style>.g{{margin:0}}</style></head><body><div id="search"><div id="rso">{blocks}</div></div></body></html>'


def bing_page(results: list[tuple[str, str, str]]) -> str:
    import base64

    items = "".join(
        '<li class="b_algo" data-id=""><div class="b_tpcn"><a class="tilk" href="#"><div class="tpic"></div></a></div>'
        f'<h2><a href="https://www.bing.com/ck/a?!&amp;&amp;p=abc&amp;u=a1{base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")}&amp;ntb=1">{title}</a></h2>'
        f'<div class="b_caption"><p class="b_lineclamp2 b_algoSlug"><span class="algoSlug_icon">Web</span>{snippet}</p></div></li>'
        for title, url, snippet in results
    )
    return f'<!DOCTYPE html><html lang="en"><head><title>query - Search</title></head><body><ol id="b_results">{items}<li class="b_pag"><nav></nav></li></ol></body></html>'


def baidu_page(results: list[tuple[str, str, str]]) -> str:
    items = "".join(
        f'<div class="result c-container xpath-log new-pmd" tpl="se_com_default" mu="{url}">'
        f'<h3 class="c-title t t tts-title"><a href="http://www.baidu.com/link?url=abc{n}" target="_blank">{title}</a></h3>'
        f'<div class="c-gap-top-small"><span class="content-right_8Zs40">{snippet}</span></div></div>'
        for n, (title, url, snippet) in enumerate(results)
    )
    return f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>query_百度搜索</title></head><body><div id="content_left">{items}</div></body></html>'


def searxng_json(results: list[tuple[str, str, str]]) -> str:
    return json.dumps({
        "query": "query", "number_of_results": 0,
        "results": [
            {"url": url, "title": title, "content": snippet, "engine": "wikipedia", "engines": ["wikipedia"], "score": 1.0, "category": "general"}
            for title, url, snippet in results
        ],
        "answers": [], "corrections": [], "infoboxes": [], "suggestions": [], "unresponsive_engines": [],
    })


def brave_json(results: list[tuple[str, str, str]]) -> str:
    return json.dumps({
        "type": "search", "query": {"original": "query", "more_results_available": True},
        "web": {"type": "search", "results": [
            {"title": title, "url": url, "is_source_local": False, "description": f"<strong>{snippet}</strong>",
             "profile": {"name": "Example"}, "language": "en", "family_friendly": True}
            for title, url, snippet in results
        ]},
        "mixed": {"type": "mixed", "main": []},
    })


def tavily_json(results: list[tuple[str, str, str]]) -> str:
    return json.dumps({
        "query": "query", "follow_up_questions": None, "answer": None, "images": [],
        "results": [{"title": title, "url": url, "content": snippet, "score": 0.9, "raw_content": None}
                    for title, url, snippet in results],
        "response_time": 0.8,
    })
