"""One classifier for every network address a source may connect to.

:func:`classify` names the kind of network an address belongs to. IPv6 forms that carry an IPv4
address inside (IPv4-mapped ``::ffff:a.b.c.d``, IPv4-translated ``::ffff:0:a.b.c.d``,
IPv4-compatible ``::a.b.c.d``, NAT64 ``64:ff9b::/96``, 6to4 ``2002::/16``, Teredo ``2001::/32``
(server and client), ISATAP interface ids) are classified by the IPv4 addresses they reach, so
``[64:ff9b::a9fe:a9fe]`` is the metadata service and ``[::127.0.0.1]`` is loopback. An address
that reaches several (Teredo) gets the most restricted kind among them.

Kinds, from most to least restricted:

* ``metadata``: cloud instance-metadata services (169.254.169.254, 169.254.170.2, 100.100.100.200,
  168.63.129.16, fd00:ec2::254);
* ``link-local`` (169.254.0.0/16, fe80::/10), ``unspecified`` (0.0.0.0/8, ::), ``multicast``
  (224.0.0.0/4, ff00::/8), ``broadcast`` — never reachable from a tool call (:data:`NEVER`);
* ``reserved``: documentation, benchmarking, future-use and other non-global space;
* ``loopback`` (127.0.0.0/8, ::1);
* ``private``: RFC 1918, carrier-grade NAT 100.64.0.0/10, unique-local fc00::/7, site-local
  fec0::/10, local-use NAT64 64:ff9b:1::/48;
* ``public``: globally routable.
"""

from __future__ import annotations

import ipaddress

__all__ = ["Address", "KINDS", "NEVER", "classify", "parse_address", "reached"]

Address = ipaddress.IPv4Address | ipaddress.IPv6Address

#: every kind, most restricted first
KINDS = ("metadata", "link-local", "unspecified", "multicast", "broadcast", "reserved", "loopback", "private",
         "public")
#: kinds no policy may open
NEVER = frozenset({"metadata", "link-local", "unspecified", "multicast", "broadcast"})

_net = ipaddress.ip_network
_METADATA = frozenset(ipaddress.ip_address(a) for a in (
    "169.254.169.254", "169.254.170.2", "169.254.170.23", "100.100.100.200", "168.63.129.16", "fd00:ec2::254",
    "fd00:ec2::23"))
_V4 = (
    (_net("0.0.0.0/8"), "unspecified"), (_net("127.0.0.0/8"), "loopback"), (_net("169.254.0.0/16"), "link-local"),
    (_net("224.0.0.0/4"), "multicast"), (_net("255.255.255.255/32"), "broadcast"), (_net("240.0.0.0/4"), "reserved"),
    (_net("10.0.0.0/8"), "private"), (_net("172.16.0.0/12"), "private"), (_net("192.168.0.0/16"), "private"),
    (_net("100.64.0.0/10"), "private"), (_net("192.0.0.0/24"), "reserved"), (_net("192.0.2.0/24"), "reserved"),
    (_net("192.88.99.0/24"), "reserved"), (_net("198.18.0.0/15"), "reserved"), (_net("198.51.100.0/24"), "reserved"),
    (_net("203.0.113.0/24"), "reserved"),
)
_V6 = (
    (_net("::/128"), "unspecified"), (_net("::1/128"), "loopback"), (_net("fe80::/10"), "link-local"),
    (_net("fec0::/10"), "private"), (_net("fc00::/7"), "private"), (_net("ff00::/8"), "multicast"),
    (_net("64:ff9b:1::/48"), "private"), (_net("100::/64"), "reserved"), (_net("2001:db8::/32"), "reserved"),
)
_MAPPED = _net("::ffff:0:0/96")
_TRANSLATED = _net("::ffff:0:0:0/96")
_COMPATIBLE = _net("::/96")
_NAT64 = _net("64:ff9b::/96")
_SIX_TO_FOUR = _net("2002::/16")
_TEREDO = _net("2001::/32")


def parse_address(text: str) -> Address:
    """An address from its text (brackets and an IPv6 zone id are ignored).

    Raises:
        ValueError: not an IP address.
    """
    return ipaddress.ip_address(text.strip().strip("[]").split("%", 1)[0])


def reached(addr: Address) -> list[Address]:
    """The addresses a connection to ``addr`` may end up at: the IPv4 ones an IPv6 form carries, else itself."""
    if addr.version == 4:
        return [addr]
    v6 = ipaddress.IPv6Address(int(addr))  # without a zone id
    value = int(v6)
    low32 = ipaddress.IPv4Address(value & 0xFFFFFFFF)
    if v6 in _MAPPED or v6 in _TRANSLATED or v6 in _NAT64:
        return [low32]
    if v6 in _COMPATIBLE and value > 1:
        return [low32]
    if v6 in _SIX_TO_FOUR:
        return [ipaddress.IPv4Address((value >> 80) & 0xFFFFFFFF)]
    if v6 in _TEREDO:
        server, client = v6.teredo  # type: ignore[misc]
        return [server, client]
    if (value >> 32) & 0xFDFFFFFF == 0x00005EFE:  # ISATAP interface id (…:0:5efe:a.b.c.d, …:200:5efe:a.b.c.d)
        return [v6, low32]
    return [v6]


def _plain(addr: Address) -> str:
    if addr in _METADATA:
        return "metadata"
    for network, kind in (_V4 if addr.version == 4 else _V6):
        if addr in network:
            return kind
    return "public" if addr.is_global else "reserved"


def classify(addr: Address | str) -> str:
    """The kind of network ``addr`` reaches (see the module docstring); the most restricted of several."""
    if isinstance(addr, str):
        addr = parse_address(addr)
    kinds = [_plain(a) for a in reached(addr)]
    return min(kinds, key=KINDS.index)
