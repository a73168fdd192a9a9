"""Host names and addresses as the egress rules compare them.

A URL's host is normalised the way browsers and the C library read it
(lower case, no brackets or trailing dot, and IPv4 numbers in any spelling:
2130706433, 127.1, 0177.0.0.1 and 0x7f.0.0.1 are all 127.0.0.1), so that a
rule about an address holds under every spelling of it.
"""

from __future__ import annotations

import ipaddress
import string

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

LOCAL_NAMES = frozenset({
    "localhost", "localhost.localdomain", "localhost6", "localhost6.localdomain6",
    "ip6-localhost", "ip6-loopback",
})
# Prefixes under which an IPv6 address carries an IPv4 address that a gateway
# (NAT64, 6to4 relay) or the kernel may end up delivering to.
NAT64 = ipaddress.ip_network("64:ff9b::/96")
NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")
IPV4_COMPATIBLE = ipaddress.ip_network("::/96")
SHARED_ADDRESS_SPACE = ipaddress.ip_network("100.64.0.0/10")


def address_problem(address: IPAddress) -> str | None:
    """Why `address` is not a public internet address ("private address",
    ...), or None for a public one."""
    if address.is_unspecified:
        return "unspecified address"
    if address.is_loopback:
        return "loopback address"
    if address.is_link_local:
        return "link-local address"
    if address.is_multicast:
        return "multicast address"
    if isinstance(address, ipaddress.IPv6Address):
        embedded = embedded_ipv4(address)
        if embedded is not None:
            problem = address_problem(embedded)
            return f"{problem} {embedded} in IPv6 form" if problem else None
        if address in IPV4_COMPATIBLE or address in NAT64_LOCAL:
            return "reserved address"
        if address.is_site_local:
            return "site-local address"
    if address in SHARED_ADDRESS_SPACE:
        return "shared address (carrier-grade NAT)"
    if address.is_private:
        return "private address"
    if address.is_reserved:
        return "reserved address"
    if not address.is_global:
        return "non-public address"
    return None


def embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv4-mapped, 6to4 or NAT64 address stands for."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address in NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def address_forms(address: IPAddress) -> tuple[IPAddress, ...]:
    """`address` (without its zone: fe80::1%eth0 is fe80::1 on eth0), and
    the IPv4 address it carries if it is an IPv6 form of one."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.scope_id is not None:
            address = ipaddress.IPv6Address(int(address))
        embedded = embedded_ipv4(address)
        if embedded is not None:
            return address, embedded
    return (address,)


def normalize_host(host: str) -> str:
    """Lower case, without brackets or a trailing dot, an IP address in its
    standard form; ValueError if `host` is neither an IP address (in any
    spelling) nor a plausible DNS name."""
    host = host.strip()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    host = host.lower().removesuffix(".")
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        pass
    number = _ipv4_number_spelling(host)
    if number is not None:
        return number
    labels = host.split(".")
    if not host or len(host) > 253 or not all(
        0 < len(label) <= 63 and all(c.isascii() and (c.isalnum() or c in "-_") for c in label)
        for label in labels
    ):
        raise ValueError(f"not a host name: {host!r}")
    return host


def _ipv4_number_spelling(host: str) -> str | None:
    """The IPv4 address a host whose last label is a number stands for (the
    WHATWG URL rules, which inet_aton follows too); None when the last label
    is not a number. ValueError when it is, but the whole is no address: no
    DNS name ends in a number."""
    parts = host.split(".")
    last = parts[-1]
    if not last.isascii() or not (last.isdigit() or (last.startswith("0x") and all(c in string.hexdigits for c in last[2:]))):
        return None
    if len(parts) > 4:
        raise ValueError(f"not a host name: {host!r}")
    numbers = [_ipv4_part(part, host) for part in parts]
    if any(n > 255 for n in numbers[:-1]) or numbers[-1] >= 256 ** (5 - len(numbers)):
        raise ValueError(f"not an IPv4 address: {host!r}")
    value = numbers[-1]
    for index, number in enumerate(numbers[:-1]):
        value += number << (8 * (3 - index))
    return str(ipaddress.IPv4Address(value))


def _ipv4_part(part: str, host: str) -> int:
    try:
        if part.startswith("0x"):
            return int(part[2:] or "0", 16)
        if len(part) > 1 and part.startswith("0"):
            return int(part[1:], 8)
        return int(part, 10)
    except ValueError:
        raise ValueError(f"not an IPv4 address: {host!r}") from None


def is_local_name(host: str) -> bool:
    """A name that always means this host (localhost and the like)."""
    return host in LOCAL_NAMES or host.endswith(".localhost")
