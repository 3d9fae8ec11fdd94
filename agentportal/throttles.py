"""Rate limits for the API, counted in the cache every web node shares (the database's)."""

from django.conf import settings
from rest_framework import exceptions
from rest_framework.throttling import SimpleRateThrottle

from agentportal.counters import WindowCounter, counter_key
from agentportal.principals import Principal
from agentportal.proxies import client_address


class ApiKeyRateThrottle(SimpleRateThrottle):
    """AGENTPORTAL_API_RATE requests per key (default 600 a minute); requests without a key
    are counted per address."""

    scope = "api"

    def get_rate(self) -> str:
        return settings.AGENTPORTAL["API_RATE"]

    def get_cache_key(self, request, view) -> str:
        principal = request.auth
        if isinstance(principal, Principal) and principal.api_key is not None:
            ident = f"key:{principal.api_key.pk}"
        else:
            ident = f"address:{client_address(request)}"
        return self.cache_format % {"scope": self.scope, "ident": ident}


class AuthFailures:
    """Wrong API keys, counted per address for a minute: past AGENTPORTAL_AUTH_FAILURES_PER_
    MINUTE, a wrong key from that address is answered 429, not 401."""

    window = 60

    def __init__(self, request) -> None:
        self.counter = WindowCounter(
            counter_key("auth-failures", client_address(request)), self.window
        )

    def record_and_check(self) -> None:
        if self.counter.add() > settings.AGENTPORTAL["AUTH_FAILURES_PER_MINUTE"]:
            raise exceptions.Throttled(wait=self.window)
