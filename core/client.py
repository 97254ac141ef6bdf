"""The client's address: REMOTE_ADDR, unless a trusted proxy says who it forwarded.

Behind a proxy every request's REMOTE_ADDR is the proxy's; a limit per address
then becomes one limit for everyone. A proxy appends the address it received
the request from to X-Forwarded-For, so the header is read from the right: the
last entry was written by the proxy that connected to us, the one before it by
the proxy before that, and so on. Each entry is believed only while the hop that
wrote it is trusted (SECKILL_TRUSTED_PROXIES), so the answer is the right-most
entry that is not itself a trusted proxy. Everything left of it was written by
the client and proves nothing; a client that sends the header itself only adds
entries that are never reached.

An entry that is not an address (a proxy writing something unexpected, or
"unknown") stops the walk: the answer is then the last address we could believe,
the trusted hop that wrote the bad entry. That is safe (no client can choose it)
and only as coarse as the proxy set-up that produced it.
"""
from __future__ import annotations

import logging
from ipaddress import IPv4Address, IPv6Address, ip_address, ip_network

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

Address = IPv4Address | IPv6Address
logger = logging.getLogger(__name__)
# Headers a proxy adds to say whom it forwarded (any of them hints at one).
FORWARDING_HEADERS = ("HTTP_X_FORWARDED_FOR", "HTTP_FORWARDED", "HTTP_X_REAL_IP")


def parse_trusted_proxies(raw: str) -> tuple:
    """ "10.0.0.0/8, 2001:db8::1" -> networks (read once, by the settings).
    A bad entry stops the start, naming itself."""
    networks = []
    for entry in (e.strip() for e in raw.split(",")):
        if not entry:
            continue
        try:
            networks.append(ip_network(entry))
        except ValueError as exc:
            raise ImproperlyConfigured(
                f"SECKILL_TRUSTED_PROXIES: {entry!r} is not an address or CIDR ({exc})") from None
    return tuple(networks)


def _parse(entry: str) -> Address | None:
    entry = entry.strip()
    try:
        addr = ip_address(entry)
    except ValueError:
        # "192.0.2.1:4711" and "[2001:db8::1]:4711", as some proxies write them.
        host, sep, port = entry.rpartition(":")
        if not (sep and port.isdigit()):
            return None
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        try:
            addr = ip_address(host)
        except ValueError:
            return None
    if addr.version == 6 and addr.ipv4_mapped:  # a dual-stack socket's view of an IPv4 peer
        return addr.ipv4_mapped
    return addr


def _trusted(addr: Address, networks: tuple) -> bool:
    return any(addr in net for net in networks)


def client_address(meta: dict) -> str:
    """The client's address of a request's WSGI environ (see the module docstring)."""
    remote = meta.get("REMOTE_ADDR") or ""
    networks = settings.SECKILL_TRUSTED_PROXIES
    if not networks:
        return remote or "unknown"
    hop = _parse(remote)
    if hop is None:
        return remote or "unknown"
    forwarded = meta.get("HTTP_X_FORWARDED_FOR")
    if forwarded:
        for entry in reversed(forwarded.split(",")):
            if not _trusted(hop, networks):
                break
            previous = _parse(entry)
            if previous is None:
                break
            hop = previous
    return str(hop)


def request_client_address(request) -> str:
    """`client_address` of a Django request (django-axes' AXES_CLIENT_IP_CALLABLE)."""
    return client_address(request.META)


class ForwardingWatch:
    """Notices, once per process, a proxy that nobody listed: a request from a
    private or loopback address that carries forwarding headers while
    SECKILL_TRUSTED_PROXIES is empty. Behind such a proxy every client has the
    proxy's address, so the per-client limits (unknown tokens, the admin's
    lockout) are one limit for everyone. The web application shows it each
    request while `active` (one attribute read when a proxy is trusted)."""

    def __init__(self) -> None:
        self.active = not settings.SECKILL_TRUSTED_PROXIES

    def see(self, meta: dict) -> None:
        if not self.active or not any(name in meta for name in FORWARDING_HEADERS):
            return
        remote = meta.get("REMOTE_ADDR") or ""
        peer = _parse(remote)
        if peer is None or not (peer.is_private or peer.is_loopback):
            return  # a client on the internet sending the header proves nothing about a proxy
        self.active = False
        logger.warning("a request from %s carries forwarding headers (%s) but SECKILL_TRUSTED_PROXIES is empty: if "
                       "a proxy forwards to this server, every client counts as %s for the unknown-token limit, "
                       "the admin lockout and the logs. List the proxies in SECKILL_TRUSTED_PROXIES, a TLS proxy "
                       "in front of HAProxy too (docs/operations.md, 'Abusive clients'). Said once per process.",
                       remote, ", ".join(h[5:].replace("_", "-").title() for h in FORWARDING_HEADERS if h in meta),
                       remote)
