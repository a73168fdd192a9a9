"""Where a connection may go: the rule the egress proxy (tool code), the web
tools and the browser's proxy share.

Public internet addresses may be reached (tool code: on a few ports only).
Everything else -- loopback, private, link-local, CGNAT, multicast, any
address of the worker's own host -- only where an operator's allow entry
opens it, and an allow entry names ports, never a whole host:

    "http://127.0.0.1:8000"     an origin: that host (name or address), that port
    "https://mirror.lan"        the scheme's port (443)
    "10.0.0.0/8 ports 80,443"   a network (or one address, or a name) and its ports

A network opens an address of this host only when it names that address
alone or is a loopback network: a LAN range must not open the worker's own
services by accident. The control plane (control_plane.py) is refused first,
whatever the allow entries say.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from activities.tools.addresses import IPAddress, IPNetwork, address_forms, address_problem, is_local_name, normalize_host
from activities.tools.control_plane import DEFAULT_PORTS, ControlPlane, Resolver
from activities.tools.own_host import is_own_host, own_host_addresses

ENTRY_FORMS = '"http://HOST:PORT" (an origin) or "NETWORK ports PORT,PORT" (e.g. "10.0.0.0/8 ports 80,443")'
_PORTS_FORM = re.compile(r"^(\S+)\s+ports\s+(\d+(?:\s*,\s*\d+)*)$")
LOOPBACK_V4 = ipaddress.IPv4Network("127.0.0.0/8")
LOOPBACK_V6 = ipaddress.IPv6Network("::1/128")


@dataclass(frozen=True)
class AllowEntry:
    ports: frozenset[int]
    network: IPNetwork | None = None
    name: str | None = None
    """A host name: every address it resolves to is opened on `ports`."""

    @property
    def names_one_address(self) -> bool:
        """Opens this host's own addresses too (see the module docstring)."""
        net = self.network
        if net is None:
            return False
        if isinstance(net, ipaddress.IPv4Network):
            return net.num_addresses == 1 or net.subnet_of(LOOPBACK_V4)
        return net.num_addresses == 1 or net.subnet_of(LOOPBACK_V6)


def parse_allow_entry(entry: str) -> AllowEntry:
    """One allow entry (see the module docstring); ValueError saying what is wrong."""
    text = entry.strip()
    if "://" in text:
        return _origin(text)
    match = _PORTS_FORM.match(text)
    if match is None:
        raise ValueError(_not_an_entry(entry))
    ports = frozenset(int(p) for p in match.group(2).split(","))
    if not all(0 < p < 65536 for p in ports):
        raise ValueError(f"{entry!r}: ports are 1 to 65535")
    return _target(match.group(1), ports, entry)


def _origin(text: str) -> AllowEntry:
    parts = urlsplit(text)
    try:
        port = parts.port if parts.port is not None else DEFAULT_PORTS.get(parts.scheme)
    except ValueError:
        port = 0
    if parts.scheme not in DEFAULT_PORTS:
        raise ValueError(f"{text!r} is not an http(s) origin")
    if not port:
        raise ValueError(f"{text!r}: ports are 1 to 65535")
    if parts.username is not None or parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ValueError(f"{text!r} is not an origin (scheme://host:port, no path, user or query)")
    return _target(parts.hostname or "", frozenset({port}), text)


def _target(host: str, ports: frozenset[int], entry: str) -> AllowEntry:
    try:
        return AllowEntry(ports, network=ipaddress.ip_network(host.strip("[]"), strict=False))
    except ValueError:
        pass
    try:
        return AllowEntry(ports, network=ipaddress.ip_network(normalize_host(host)))  # 127.1, 2130706433, ...
    except ValueError:
        pass
    try:
        return AllowEntry(ports, name=normalize_host(host))
    except ValueError:
        raise ValueError(f"{entry!r}: {host!r} is neither a network nor a host name") from None


def _not_an_entry(entry: str) -> str:
    bare = entry.strip()
    if "/" in bare:
        try:
            ipaddress.ip_network(bare, strict=False)
        except ValueError:
            pass
        else:
            return f'{entry!r} names no port: an entry opens ports, never a whole network; write "{bare} ports 80,443"'
    try:
        host = normalize_host(bare)
    except ValueError:
        return f"{entry!r} is not an allow entry: write {ENTRY_FORMS}"
    literal = f"[{host}]" if ":" in host else host
    return (
        f"{entry!r} names no port: an entry opens ports, never a whole host; write an origin "
        f'such as "http://{literal}:8000", or "{bare} ports 80,443"'
    )


class AllowList:
    def __init__(self, entries: Iterable[str] = ()) -> None:
        self.entries = tuple(parse_allow_entry(e) for e in entries)
        self.ports = frozenset(p for e in self.entries for p in e.ports)

    def names(self, host: str, port: int) -> bool:
        """An entry opens `port` of the name `host`."""
        return any(e.name == host and port in e.ports for e in self.entries)

    def opens(self, address: IPAddress, port: int, own: frozenset[IPAddress]) -> bool:
        """An entry opens `port` of `address` (or of the IPv4 address it maps)."""
        forms = [address]
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            forms.append(address.ipv4_mapped)
        for entry in self.entries:
            if entry.network is None or port not in entry.ports:
                continue
            if any(form in entry.network for form in forms) and (entry.names_one_address or not is_own_host(address, own)):
                return True
        return False


class EgressPolicy:
    """Which destinations a connection may reach.

    allow: allow entries (see the module docstring).
    control_plane: refused always.
    public_ports: the ports public addresses may be reached on (tool code's
        80 and 443); None: any.
    """

    def __init__(
        self,
        allow: Iterable[str] = (),
        control_plane: ControlPlane | None = None,
        *,
        public_ports: Collection[int] | None = None,
        own_host: Callable[[], frozenset[IPAddress]] = own_host_addresses,
    ) -> None:
        self.allow = AllowList(allow)
        self.control_plane = control_plane or ControlPlane()
        self.public_ports = frozenset(public_ports) if public_ports is not None else None
        self.own_host = own_host

    def name_refusal(self, host: str, port: int) -> str | None:
        """Why `host` (normalised) on `port` is refused before it is even resolved."""
        if self.public_ports is not None and port not in self.public_ports and port not in self.allow.ports:
            return self._port_words(port)
        refusal = self.control_plane.name_refusal(host, port)
        if refusal or self.allow.names(host, port):
            return refusal
        if host in self.control_plane.hosts and not _is_address(host):  # addresses: after the rest
            return f"egress to {host} is not allowed (a host of the agent's control plane)"
        if is_local_name(host):
            return f"egress to {host} (local host name) is not allowed"
        return None

    async def prepare(self, resolver: Resolver, timeout: float) -> None:
        """Resolve what address_refusal compares with (the control plane's names)."""
        await self.control_plane.refresh(resolver, timeout)

    def address_refusal(self, host: str, port: int, addresses: Iterable[str]) -> str | None:
        """Why `host` on `port`, resolved to `addresses`, is refused; None if
        every one of them may be reached. After prepare()."""
        own = self.own_host()
        named = self.allow.names(host, port)
        for text in addresses:
            try:
                address = ipaddress.ip_address(text)
            except ValueError:
                return f"egress to {host} is not allowed (unusable address {text!r})"
            where = text if text == host else f"{host}, which resolves to {text}"
            refusal = self.control_plane.refusal(address, port, own, where)
            if refusal:
                return refusal
            if named or self.allow.opens(address, port, own):
                continue
            problem = _problem(address, own)
            if problem:
                return f"egress to {where} ({problem}) is not allowed"
            if str(address) in self.control_plane.hosts:
                return f"egress to {where} is not allowed (a host of the agent's control plane)"
            if self.public_ports is not None and port not in self.public_ports:
                return self._port_words(port)
        return None

    def _port_words(self, port: int) -> str:
        allowed = ", ".join(str(p) for p in sorted(self.public_ports or ()))
        return f"egress to port {port} is not allowed (allowed ports: {allowed})"


def _problem(address: IPAddress, own: frozenset[IPAddress]) -> str | None:
    """Why `address` is not public: the address problem, or (first, since
    it says more than "private address") that it is this host's."""
    if is_own_host(address, own) and not any(f.is_loopback or f.is_unspecified for f in address_forms(address)):
        return "an address of this host"
    return address_problem(address)


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return False


async def system_resolver(host: str) -> list[str]:
    """The addresses the system resolver gives for `host`, in its order."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, None, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))
