"""Which peers may say who the client is: AGENTPORTAL_TRUSTED_PROXIES, the addresses or networks
of the proxies in front of the web server. The web server (gunicorn_conf) and Django
(client_address) both read it, so a header from anyone else is ignored by both."""

import functools
import ipaddress

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def trusted_proxies_parse(text: str) -> tuple[str, ...]:
    """`10.0.0.5,10.1.0.0/16` as networks in their usual spelling; anything else stops the
    process at start with a sentence naming the variable."""
    proxies = []
    for entry in (part.strip() for part in text.split(",")):
        if not entry:
            continue
        try:
            proxies.append(str(ipaddress.ip_network(entry)))
        except ValueError:
            raise ImproperlyConfigured(
                "AGENTPORTAL_TRUSTED_PROXIES lists the addresses or networks of the proxies in "
                f"front of the web server, such as 10.0.0.5,10.1.0.0/16 (not a count); {entry!r} "
                "is neither."
            ) from None
    return tuple(proxies)


@functools.lru_cache(maxsize=8)
def _networks(proxies: tuple[str, ...]) -> tuple[Network, ...]:
    return tuple(ipaddress.ip_network(proxy) for proxy in proxies)


def _host(hop: str) -> str:
    """An X-Forwarded-For entry without the port a proxy may add (`1.2.3.4:5`, `[::1]:5`)."""
    if hop.startswith("[") and "]" in hop:
        return hop[1 : hop.index("]")]
    if hop.count(":") == 1:
        return hop.split(":", 1)[0]
    return hop


def _trusted(address: str, networks: tuple[Network, ...]) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in network for network in networks)


def client_address(request) -> str:
    """The client's address: the connection's own, unless it comes from a trusted proxy; then
    the nearest address in X-Forwarded-For that is not a trusted proxy's (each proxy appends
    the peer it saw, so what a client wrote itself is further left and never read). The web
    server has already done the same with the same list; doing it again changes nothing."""
    networks = _networks(settings.AGENTPORTAL["TRUSTED_PROXIES"])
    peer = request.META.get("REMOTE_ADDR", "")
    if not _trusted(peer, networks):
        return peer
    forwarded = request.META.get("HTTP_X_FORWARDED_FOR", "")
    hops = [_host(hop.strip()) for hop in forwarded.split(",") if hop.strip()]
    for hop in reversed(hops):
        if not _trusted(hop, networks):
            return hop
    return hops[0] if hops else peer
