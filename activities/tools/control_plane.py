"""The agent's control plane: endpoints no web path and no tool code may reach.

The Temporal frontend (it can read, answer and terminate every run), its
HTTP API and Web UI, the LLM endpoints, the MCP servers and the worker's
metrics. A destination is compared with them after normalisation and
resolution, as (address, port): a name of the endpoint resolves to its
addresses, and an endpoint on this host (loopback, unspecified, one of the
host's addresses, or a name that resolves to one) listens, as far as the
rules know, on every address of the host -- which a server bound to 0.0.0.0
does.
"""

from __future__ import annotations

import asyncio
import ipaddress
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from activities.tools.addresses import IPAddress, address_forms, is_local_name, normalize_host
from activities.tools.own_host import is_own_host

Resolver = Callable[[str], Awaitable[list[str]]]
"""host name -> the addresses (text form) it resolves to."""

RESOLVED_SECONDS = 30.0
"""How long the addresses of an endpoint's name are used before it is resolved again."""
UNRESOLVED_SECONDS = 5.0
"""How long a name that did not resolve is left before trying again."""
DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True)
class Endpoint:
    host: str
    """Normalised (addresses in standard form, names in lower case)."""
    port: int
    what: str = "a control-plane endpoint"
    """Named in refusals: "the Temporal frontend", "the LLM endpoint of [llm]"."""

    @classmethod
    def parse(cls, text: str, what: str, default_port: int | None = None) -> Endpoint:
        """From "host:port", "[v6]:port" or an http(s) URL (its port, or the
        scheme's); ValueError if `text` is none of these."""
        parts = urlsplit(text if "://" in text else f"//{text}")
        try:
            port = parts.port if parts.port is not None else DEFAULT_PORTS.get(parts.scheme, default_port)
            host = normalize_host(parts.hostname or "")
        except ValueError:
            raise ValueError(f"{text!r} is not host:port nor a URL") from None
        if not port:
            raise ValueError(f"{text!r} names no port")
        return cls(host, port, what)


class ControlPlane:
    def __init__(self, endpoints: Iterable[Endpoint | tuple[str, int]] = ()) -> None:
        self.endpoints = tuple(
            Endpoint(normalize_host(e.host), e.port, e.what) if isinstance(e, Endpoint) else Endpoint(normalize_host(e[0]), e[1])
            for e in endpoints
        )
        self.hosts = frozenset(e.host for e in self.endpoints)
        """Names and addresses of the endpoints: refused on any port unless an
        allow entry opens that port of them."""
        self._resolved: dict[str, tuple[float, tuple[IPAddress, ...]]] = {}

    def _names(self) -> set[str]:
        return {e.host for e in self.endpoints if _literal(e.host) is None and not is_local_name(e.host)}

    async def refresh(self, resolver: Resolver, timeout: float) -> None:
        """Resolve the endpoints' names whose addresses are not fresh."""
        now = time.monotonic()
        stale = [name for name in self._names() if self._resolved.get(name, (0.0, ()))[0] <= now]
        if stale:
            await asyncio.gather(*(self._resolve(name, resolver, timeout) for name in stale))

    async def _resolve(self, name: str, resolver: Resolver, timeout: float) -> None:
        try:
            found = tuple(ipaddress.ip_address(a) for a in await asyncio.wait_for(resolver(name), timeout))
            expires = RESOLVED_SECONDS
        except (OSError, UnicodeError, ValueError, asyncio.TimeoutError):
            # The name cannot be reached under itself now either; its literal
            # addresses and this host's ports stay refused.
            found, expires = (), UNRESOLVED_SECONDS
        self._resolved[name] = (time.monotonic() + expires, found)

    def name_refusal(self, host: str, port: int) -> str | None:
        """Why (host, port), host normalised, is refused before resolution."""
        for endpoint in self.endpoints:
            if (endpoint.host, endpoint.port) == (host, port):
                return _words(host, port, endpoint)
        return None

    def refusal(self, address: IPAddress, port: int, own: frozenset[IPAddress], shown: str) -> str | None:
        """Why a connection to (address, port) is refused: it is an endpoint's
        address, or an address of this host and an endpoint listens here."""
        forms = address_forms(address)
        here = is_own_host(address, own)
        for endpoint in self.endpoints:
            if endpoint.port != port:
                continue
            targets = self._addresses(endpoint)
            local = is_local_name(endpoint.host) or any(is_own_host(t, own) for t in targets)
            if (local and here) or not _all_forms(targets).isdisjoint(forms):
                return _words(shown, port, endpoint)
        return None

    def _addresses(self, endpoint: Endpoint) -> tuple[IPAddress, ...]:
        literal = _literal(endpoint.host)
        if literal is not None:
            return (literal,)
        return self._resolved.get(endpoint.host, (0.0, ()))[1]


def _literal(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def _all_forms(addresses: Iterable[IPAddress]) -> set[IPAddress]:
    return {form for address in addresses for form in address_forms(address)}


def _words(shown: str, port: int, endpoint: Endpoint) -> str:
    return (
        f"{shown} port {port} is {endpoint.what}, part of the agent's control plane, "
        "which no web page, web tool or tool code may reach"
    )
