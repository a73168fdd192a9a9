"""HTTP for the web tools, to checked addresses only.

Every hop of a request (the URL, then each redirect's target) is checked the
way the egress proxy checks tool code's connections (EgressPolicy,
activities/tools/egress_rules.py): only http and https; a host name is
resolved once, every address it resolves to must be public (not loopback,
private, link-local, CGNAT, multicast, nor those in IPv6 form, nor an address
of the worker's own host) or in an origin the operator opened (`[web]
allow`), and the connection goes to that checked address, never to the name
again -- so a second DNS answer cannot point the request elsewhere. The
agent's control plane (the Temporal frontend, its HTTP API and Web UI, the
LLM endpoints, the MCP servers, the worker's metrics) is refused always,
under any name or spelling of its addresses. Credentials (an API key header)
go to the origin the request was made for, never along a redirect to another.
"""

from __future__ import annotations

import asyncio
import ipaddress
import ssl
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urljoin, urlsplit

import httpcore2
import httpx2

from activities.tools.addresses import normalize_host
from activities.tools.control_plane import ControlPlane, Endpoint, Resolver
from activities.tools.egress_rules import EgressPolicy, system_resolver

MAX_REDIRECTS = 5
USER_AGENT = "Mozilla/5.0 (compatible; durable-manus web tools)"
CREDENTIAL_HEADERS = frozenset({
    "authorization", "proxy-authorization", "cookie", "x-api-key", "api-key", "x-subscription-token",
})
"""Header names that carry credentials wherever they are passed (headers= too)."""


class Refused(Exception):
    """A destination the web tools may not reach; the message says why."""


class WebError(Exception):
    """The exchange failed (connection, timeout, too many redirects)."""


@dataclass
class Page:
    url: str
    """The final URL, after redirects."""
    status: int
    headers: Mapping[str, str]
    body: bytes
    truncated: bool
    """The body was longer than the byte cap; `body` is its beginning."""
    redirects: list[str] = field(default_factory=list)

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "").split(";")[0].strip().lower()

    @property
    def charset(self) -> str:
        for part in self.headers.get("content-type", "").split(";")[1:]:
            name, _, value = part.partition("=")
            if name.strip().lower() == "charset" and value.strip():
                return value.strip().strip('"')
        return "utf-8"

    def text(self) -> str:
        try:
            return self.body.decode(self.charset, errors="replace")
        except LookupError:
            return self.body.decode("utf-8", errors="replace")


class _PinnedBackend(httpcore2.AsyncNetworkBackend):
    """Connects (host, port) only to the address checked for it."""

    def __init__(self) -> None:
        self.pins: dict[tuple[str, int], str] = {}
        self.inner = httpcore2.AnyIOBackend()

    async def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):  # noqa: ANN001
        address = self.pins.get((_host_key(host), port))
        if address is None:
            raise httpcore2.ConnectError(f"{host} port {port}: no checked address")
        return await self.inner.connect_tcp(address, port, timeout, local_address, socket_options)

    async def connect_unix_socket(self, *args, **kwargs):  # noqa: ANN002, ANN003
        raise httpcore2.ConnectError("the web tools use no UNIX sockets")

    async def sleep(self, seconds: float) -> None:
        await self.inner.sleep(seconds)


def _host_key(host: str | bytes) -> str:
    host = host.decode("ascii") if isinstance(host, bytes) else host
    return normalize_host(host)


CONNECT_SECONDS = 5.0
"""Seconds to open one connection: a server that is there answers a connect
in well under a second, while a worker whose packets are dropped (offline
behind a firewall) would otherwise wait out the whole timeout at each search
engine in turn."""


class WebAccess:
    """HTTP GET/POST to destinations the address rules allow.

    allow: `[web] allow`, origins opened although not public (egress_rules.py).
    control_plane: endpoints refused always (their hosts: unless `allow`
        opens one of their other ports).
    """

    def __init__(
        self,
        allow: Iterable[str] = (),
        control_plane: ControlPlane | Iterable[Endpoint | tuple[str, int]] = (),
        *,
        timeout: float = 20.0,
        max_bytes: int = 2 * 1024 * 1024,
        resolver: Resolver = system_resolver,
        connect_timeout: float = CONNECT_SECONDS,
    ) -> None:
        plane = control_plane if isinstance(control_plane, ControlPlane) else ControlPlane(control_plane)
        self.policy = EgressPolicy(allow=allow, control_plane=plane)
        self.timeout, self.max_bytes, self.resolver = timeout, max_bytes, resolver
        self.connect_timeout = min(timeout, connect_timeout)
        self._ssl_context: ssl.SSLContext | None = None

    async def check(self, url: str) -> tuple[str, int, str]:
        """(host, port, the address to connect to) for `url`; Refused if not allowed."""
        try:
            parts = urlsplit(url)
            port = parts.port or {"http": 80, "https": 443}.get(parts.scheme, 0)
        except ValueError as e:
            raise Refused(f"{url!r} is not a usable URL ({e})") from None
        if parts.scheme not in ("http", "https"):
            raise Refused(f"only http and https URLs can be fetched, not {parts.scheme or 'a URL without scheme'}: {url}")
        try:
            host = normalize_host(parts.hostname or "")
        except ValueError:
            raise Refused(f"{url!r} has no usable host name") from None
        refusal = self.policy.name_refusal(host, port)
        if refusal:
            raise Refused(_web_words(refusal))
        try:
            addresses = [str(ipaddress.ip_address(host))]
        except ValueError:
            try:
                addresses = await asyncio.wait_for(self.resolver(host), self.timeout)
            except asyncio.TimeoutError:
                raise WebError(f"resolving {host} timed out") from None
            except (OSError, UnicodeError) as e:
                raise WebError(f"cannot resolve {host} ({e})") from None
        if not addresses:
            raise WebError(f"{host} resolves to no address")
        await self.policy.prepare(self.resolver, self.timeout)
        refusal = self.policy.address_refusal(host, port, addresses)
        if refusal:
            raise Refused(_web_words(refusal))
        return host, port, addresses[0]

    async def request(
        self,
        url: str,
        *,
        method: str = "GET",
        params: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        credentials: Mapping[str, str] | None = None,
        json: Any = None,
        max_bytes: int | None = None,
    ) -> Page:
        """The response to `url`, following at most MAX_REDIRECTS redirects,
        each to a checked address; the body cut at max_bytes. The whole
        exchange is bounded by the timeout.

        credentials: headers (an API key) for `url`'s origin only; a redirect
        to another origin is refused while the request carries them. Headers
        named in CREDENTIAL_HEADERS count as credentials wherever given."""
        plain = {k: v for k, v in (headers or {}).items() if k.lower() not in CREDENTIAL_HEADERS}
        secret = {**{k: v for k, v in (headers or {}).items() if k.lower() in CREDENTIAL_HEADERS}, **(credentials or {})}
        try:
            return await asyncio.wait_for(
                self._request(url, method, params, plain, secret, json, max_bytes or self.max_bytes), self.timeout
            )
        except asyncio.TimeoutError:
            raise WebError(f"no complete answer from {urlsplit(url).hostname} within {self.timeout:g} s") from None

    def _tls(self) -> ssl.SSLContext:
        # Loading the CA bundle takes ~0.1 s; one context serves every request.
        if self._ssl_context is None:
            self._ssl_context = httpx2.create_ssl_context(trust_env=False)
        return self._ssl_context

    async def _request(self, url, method, params, headers, credentials, json, max_bytes) -> Page:  # noqa: ANN001
        backend = _PinnedBackend()
        transport = httpx2.AsyncHTTPTransport(verify=self._tls(), trust_env=False)  # no proxy from the environment
        # httpx's transport takes no network backend: its pool (still empty) is
        # replaced by one that connects only through the pins.
        transport._pool = httpcore2.AsyncConnectionPool(ssl_context=self._tls(), network_backend=backend)
        sent_headers = {"User-Agent": USER_AGENT, "Accept-Language": "en;q=0.9, *;q=0.5", **headers, **credentials}
        first_origin = _origin(url)
        redirects: list[str] = []
        timeouts = httpx2.Timeout(self.timeout, connect=self.connect_timeout)
        async with httpx2.AsyncClient(transport=transport, trust_env=False, follow_redirects=False, timeout=timeouts) as client:
            while True:
                host, port, address = await self.check(url)
                backend.pins[(host, port)] = address
                try:
                    async with client.stream(method, url, params=params, headers=sent_headers, json=json) as response:
                        location = response.headers.get("location")
                        if response.is_redirect and location:
                            if len(redirects) >= MAX_REDIRECTS:
                                raise WebError(f"more than {MAX_REDIRECTS} redirects from {redirects[0]}")
                            redirects.append(str(response.url))
                            url = urljoin(str(response.url), location)
                            if credentials and _origin(url) != first_origin:
                                raise Refused(
                                    f"{redirects[-1]} redirects to another origin ({url}); a request that "
                                    "carries credentials is not followed there"
                                )
                            if response.status_code in (301, 302, 303) and method != "GET":
                                method, json = "GET", None
                            params = None
                            continue
                        body, truncated = await _read(response, max_bytes)
                        return Page(str(response.url), response.status_code, dict(response.headers), body, truncated, redirects)
                except httpx2.InvalidURL as e:  # e.g. 0177.0.0.1, which the rules read and httpx does not
                    raise Refused(f"{url!r} is not a URL the HTTP client accepts ({e})") from None
                except httpx2.ConnectTimeout:
                    raise WebError(f"no connection to {host} within {self.connect_timeout:g} s") from None
                except httpx2.HTTPError as e:
                    raise WebError(f"{type(e).__name__} from {host}: {e or 'no detail'}") from None


async def _read(response: httpx2.Response, limit: int) -> tuple[bytes, bool]:
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            return b"".join(chunks)[:limit], True
    return b"".join(chunks), False


def _origin(url: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) of `url`; None if it has no usable one."""
    try:
        parts = urlsplit(url)
        return parts.scheme, normalize_host(parts.hostname or ""), parts.port or {"http": 80, "https": 443}.get(parts.scheme, 0)
    except ValueError:
        return None


def _web_words(refusal: str) -> str:
    """The egress policy's sentence, said of the web tools; a control-plane
    refusal is final, the others an operator may lift."""
    if not refusal.startswith("egress to "):
        return refusal
    return "web access to " + refusal.removeprefix("egress to ") + " (an operator may allow it in [web] allow)"
