"""Who may use the run page, and what every answer carries.

The page can start runs on the operator's worker and LLM key and answer, approve
or cancel any run, so every request must prove it comes from the operator's
browser:

- the per-server token (random at each start, never written to disk): the
  link `ui` prints once carries it, the page turns it into an HttpOnly,
  SameSite=Strict cookie and sends the browser on without it in the URL;
- the Host header names this server (a loopback name or the bound host, with
  the port): a page elsewhere that rebinds its DNS name to 127.0.0.1 is refused;
- a POST comes from this origin (Origin, and Sec-Fetch-Site when sent):
  another site's form cannot act with the operator's cookie (CSRF);
- every answer forbids framing, sniffing and any script but the page's own file
  (Content-Security-Policy without 'unsafe-inline').
"""

from __future__ import annotations

import hmac
import secrets
import socket
from dataclasses import dataclass, field
from http.cookies import CookieError, SimpleCookie

from runtime.run_page.http_server import Request, Response

TOKEN_BYTES = 32
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
WILDCARD_HOSTS = ("0.0.0.0", "::", "")

SECURITY_HEADERS = (
    (
        "Content-Security-Policy",
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
        "form-action 'self'; frame-ancestors 'none'; base-uri 'none'; object-src 'none'",
    ),
    ("X-Frame-Options", "DENY"),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
    ("Cross-Origin-Opener-Policy", "same-origin"),
    ("Cross-Origin-Resource-Policy", "same-origin"),
)


def url_host(host: str) -> str:
    """A host as a URL writes it (an IPv6 address in brackets)."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def origin_for(host: str, port: int) -> str:
    """The page's origin as links name it: loopback for a loopback or wildcard bind."""
    shown = "127.0.0.1" if host in LOOPBACK_HOSTS or host in WILDCARD_HOSTS else url_host(host)
    return f"http://{shown}:{port}"


@dataclass
class Guard:
    host: str
    port: int
    token: str = field(default_factory=lambda: secrets.token_urlsafe(TOKEN_BYTES))

    @property
    def cookie_name(self) -> str:
        # Cookies are shared by every port of a host: the port in the name keeps two pages apart.
        return f"durable_manus_page_{self.port}"

    @property
    def origin(self) -> str:
        return origin_for(self.host, self.port)

    def token_link(self) -> str:
        return f"{self.origin}/?token={self.token}"

    def allowed_hosts(self) -> set[str]:
        names = {*LOOPBACK_NAMES}
        if self.host not in WILDCARD_HOSTS:
            names.add(url_host(self.host).lower())
        else:  # any address of this machine: clients name it by its host name
            names.update({socket.gethostname().lower(), socket.getfqdn().lower()})
        return {f"{name}:{self.port}" for name in names}

    def host_ok(self, request: Request) -> bool:
        return request.headers.get("host", "").lower() in self.allowed_hosts()

    def origin_ok(self, request: Request) -> bool:
        """A POST's Origin is this page's (as the browser reached it)."""
        origin = request.headers.get("origin")
        if origin is None or origin.lower() != f"http://{request.headers.get('host', '').lower()}":
            return False
        site = request.headers.get("sec-fetch-site")
        return site is None or site == "same-origin"

    def cookie_ok(self, request: Request) -> bool:
        given = cookie_value(request.headers.get("cookie", ""), self.cookie_name)
        return given is not None and hmac.compare_digest(given.encode(), self.token.encode())

    def token_ok(self, given: str) -> bool:
        return hmac.compare_digest(given.encode(), self.token.encode())

    def set_cookie(self) -> tuple[str, str]:
        return ("Set-Cookie", f"{self.cookie_name}={self.token}; HttpOnly; SameSite=Strict; Path=/")


def cookie_value(header: str, name: str) -> str | None:
    if len(header) > 8192:
        return None
    cookies: SimpleCookie = SimpleCookie()
    try:
        cookies.load(header)
    except CookieError:
        return None
    morsel = cookies.get(name)
    return morsel.value if morsel is not None else None


def finished(response: Response, dynamic: bool = True) -> Response:
    """The response with the headers every answer carries."""
    names = {name.lower() for name, _ in response.headers}
    response.headers += [(name, value) for name, value in SECURITY_HEADERS if name.lower() not in names]
    if dynamic and "cache-control" not in names:
        response.headers.append(("Cache-Control", "no-store"))
    return response
