"""The addresses of the worker's own host.

A service that listens on 0.0.0.0 or :: (an LLM server, a Web UI, the
metrics) answers on every one of them, so the egress rules compare a
destination with all of them: every interface's IPv4 addresses (the
kernel's SIOCGIFCONF list, secondary addresses included), every IPv6
address (/proc/net/if_inet6), and the loopback and unspecified ranges.
Read afresh on each call, since addresses come and go (DHCP, VPNs).
"""

from __future__ import annotations

import array
import contextlib
import fcntl
import ipaddress
import socket
import struct

from activities.tools.addresses import IPAddress, address_forms

SIOCGIFCONF = 0x8912
IFNAMSIZ = 16
IFREQ_SIZE = IFNAMSIZ + max(16, 2 * struct.calcsize("L") + 8)
"""sizeof(struct ifreq): the name, then a union whose largest member is struct ifmap."""
MAX_IPV4_ADDRESSES = 4096
IF_INET6 = "/proc/net/if_inet6"


def own_host_addresses() -> frozenset[IPAddress]:
    """Every address configured on this host's interfaces (loopback's too)."""
    return frozenset(_ipv4_addresses()) | frozenset(_ipv6_addresses())


def is_own_host(address: IPAddress, own: frozenset[IPAddress]) -> bool:
    """`address` reaches this host: loopback, unspecified, or one of `own`,
    also in an IPv6 form (IPv4-mapped, NAT64, 6to4)."""
    return any(form.is_loopback or form.is_unspecified or form in own for form in address_forms(address))


def _ipv4_addresses() -> list[IPAddress]:
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        slots = 64
        while True:
            buffer = array.array("B", bytes(IFREQ_SIZE * slots))
            pointer, _ = buffer.buffer_info()
            request = struct.pack("iP", len(buffer), pointer)
            used = struct.unpack("iP", fcntl.ioctl(probe.fileno(), SIOCGIFCONF, request))[0]
            if used < len(buffer) or slots >= MAX_IPV4_ADDRESSES:
                break
            slots *= 2  # the list may have been cut: ask again with more room
        data = buffer.tobytes()[:used]
        found: list[IPAddress] = []
        for start in range(0, used - IFREQ_SIZE + 1, IFREQ_SIZE):
            # struct sockaddr_in after the name: family (2 bytes), port (2), address (4)
            family = struct.unpack_from("H", data, start + IFNAMSIZ)[0]
            if family == socket.AF_INET:
                found.append(ipaddress.IPv4Address(data[start + IFNAMSIZ + 4:start + IFNAMSIZ + 8]))
        return found
    return []


def _ipv6_addresses() -> list[IPAddress]:
    try:
        with open(IF_INET6, encoding="ascii") as table:
            lines = table.read().splitlines()
    except OSError:  # no IPv6 in this kernel or namespace
        return []
    found: list[IPAddress] = []
    for line in lines:
        fields = line.split()
        with contextlib.suppress(IndexError, ValueError):
            found.append(ipaddress.IPv6Address(bytes.fromhex(fields[0])))
    return found
