"""Rate limits for the API, counted in the cache every web node shares: one atomic increment
per request (agentportal.counters), so parallel requests pass no more than the limit."""

from django.conf import settings
from rest_framework import exceptions
from rest_framework.throttling import SimpleRateThrottle

from agentportal.counters import WindowCounter, counter_key
from agentportal.principals import Principal
from agentportal.proxies import client_address


class ApiKeyRateThrottle(SimpleRateThrottle):
    """AGENTPORTAL_API_RATE requests per key (default 600 a minute) in a window that starts at
    the first; requests without a key are counted per address."""

    scope = "api"

    def get_rate(self) -> str:
        return settings.AGENTPORTAL["API_RATE"]

    def get_cache_key(self, request, view) -> str:
        principal = request.auth
        if isinstance(principal, Principal) and principal.api_key is not None:
            return counter_key("api-requests", f"key:{principal.api_key.pk}")
        return counter_key("api-requests", f"address:{client_address(request)}")

    def allow_request(self, request, view) -> bool:
        count = WindowCounter(self.get_cache_key(request, view), self.duration).add()
        self.seconds_left = count.seconds_left
        return count.number <= self.num_requests

    def wait(self) -> float:
        return self.seconds_left


class AuthFailures:
    """Wrong API keys, counted per address for a minute: past AGENTPORTAL_AUTH_FAILURES_PER_
    MINUTE, a wrong key from that address is answered 429, not 401."""

    window = 60

    def __init__(self, request) -> None:
        self.counter = WindowCounter(
            counter_key("wrong-keys", client_address(request)), self.window
        )

    def record_and_check(self) -> None:
        count = self.counter.add()
        if count.number > settings.AGENTPORTAL["AUTH_FAILURES_PER_MINUTE"]:
            raise exceptions.Throttled(wait=count.seconds_left)
