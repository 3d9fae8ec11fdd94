"""A shop's webhook endpoint: which URLs are safe to call, and how payloads are signed."""

import hashlib
import hmac
import ipaddress
import socket
from urllib.parse import urlsplit

from django.conf import settings


class UnsafeWebhookUrl(ValueError):
    pass


def webhook_url_check(url: str) -> None:
    """Refuse URLs a shop could use to reach inside our network: plain http, and hosts that
    resolve to loopback, private, link-local or reserved addresses, unless the setting
    AGENTPORTAL_WEBHOOK_ALLOW_PRIVATE allows them (local test receivers)."""
    parts = urlsplit(url)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as error:
        raise UnsafeWebhookUrl(f"the webhook URL's port is not valid: {error}") from error
    allow_private = settings.AGENTPORTAL["WEBHOOK_ALLOW_PRIVATE"]
    if parts.scheme != "https" and not (allow_private and parts.scheme == "http"):
        raise UnsafeWebhookUrl("webhook URLs must use https")
    if not parts.hostname:
        raise UnsafeWebhookUrl("the webhook URL has no host")
    try:
        infos = socket.getaddrinfo(parts.hostname, port, proto=socket.IPPROTO_TCP)
    except socket.gaierror as error:
        raise UnsafeWebhookUrl(f"cannot resolve {parts.hostname}") from error
    if allow_private:
        return
    for info in infos:
        address = ipaddress.ip_address(info[4][0])
        if not address.is_global or address.is_multicast:
            raise UnsafeWebhookUrl(f"{parts.hostname} resolves to a non-public address")


def signature(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
