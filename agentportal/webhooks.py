"""A shop's webhook endpoint: which URLs are safe to call, and how payloads are signed."""

import hashlib
import hmac
import http.client
import ipaddress
import socket
import ssl
from dataclasses import dataclass
from urllib.parse import urlsplit

from django.conf import settings


class UnsafeWebhookUrl(ValueError):
    pass


@dataclass(frozen=True)
class CheckedUrl:
    """A webhook URL that passed the check, with the address it was checked at: connections
    go to that address, never to a second lookup that could answer otherwise (DNS rebinding)."""

    scheme: str
    host: str
    port: int
    addresses: tuple[str, ...]  # every address the name resolved to, all checked
    target: str  # the path and query

    def connection(self, *, timeout: float) -> http.client.HTTPConnection:
        if self.scheme == "https":
            return _PinnedHTTPSConnection(self, timeout=timeout)
        return _PinnedHTTPConnection(self, timeout=timeout)


class _PinnedHTTPConnection(http.client.HTTPConnection):
    def __init__(self, url: CheckedUrl, *, timeout: float):
        super().__init__(url.host, url.port, timeout=timeout)
        self.checked = url

    def connect(self):
        self.sock = _connect_checked(self.checked, self.timeout)


class _PinnedHTTPSConnection(http.client.HTTPSConnection):
    """TLS to the checked address; the certificate is still verified for the URL's host."""

    def __init__(self, url: CheckedUrl, *, timeout: float):
        super().__init__(url.host, url.port, timeout=timeout, context=ssl.create_default_context())
        self.checked = url

    def connect(self):
        sock = _connect_checked(self.checked, self.timeout)
        self.sock = self._context.wrap_socket(sock, server_hostname=self.host)


def _connect_checked(url: CheckedUrl, timeout: float) -> socket.socket:
    """A connection to the first checked address that answers, as a resolver would try
    them, and never to an address that was not checked."""
    error: OSError | None = None
    for address in url.addresses:
        try:
            return socket.create_connection((address, url.port), timeout)
        except OSError as failed:
            error = failed
    raise error or OSError(f"no address to connect to for {url.host}")


def webhook_url_check(url: str) -> CheckedUrl:
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
    if not allow_private:
        for info in infos:
            address = ipaddress.ip_address(info[4][0])
            if not address.is_global or address.is_multicast:
                raise UnsafeWebhookUrl(f"{parts.hostname} resolves to a non-public address")
    target = parts.path or "/"
    if parts.query:
        target = f"{target}?{parts.query}"
    addresses = tuple(dict.fromkeys(info[4][0] for info in infos))
    return CheckedUrl(
        scheme=parts.scheme, host=parts.hostname, port=port, addresses=addresses, target=target
    )


def signature(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
