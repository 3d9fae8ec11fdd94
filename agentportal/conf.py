"""The portal's own settings (tenancy, access, the site), read from the environment once when
Django's settings load (into settings.AGENTPORTAL, where the code reads them and tests
override them)."""

from typing import TypedDict

from django.core.exceptions import ImproperlyConfigured

from agentportal.env import env_bool, env_count, env_text
from agentportal.proxies import trusted_proxies_parse


class PortalSettings(TypedDict):
    SITE_URL: str
    TRUSTED_PROXIES: tuple[str, ...]
    LOGIN_FAILURES: int
    LOGIN_LOCK_SECONDS: int
    LOGIN_FAILURES_PER_NAME: int
    LOGIN_NAME_LOCK_SECONDS: int
    API_RATE: str
    AUTH_FAILURES_PER_MINUTE: int
    STAFF_DISPLAY_NAME: str
    METRICS_TOKEN: str
    WEBHOOK_ALLOW_PRIVATE: bool
    WEB_PROCESSES: int
    DEFAULT_MAX_RUNNING_RUNS: int


def site_url() -> str:
    """Where people reach the portal, for the links in emails (a mail client cannot follow a
    relative one)."""
    url = env_text("AGENTPORTAL_SITE_URL", "http://127.0.0.1:8000").strip().rstrip("/")
    if not url.startswith(("http://", "https://")) or "/" in url.split("://", 1)[1]:
        raise ImproperlyConfigured(
            "AGENTPORTAL_SITE_URL must be the portal's address, such as"
            f" https://support.example.com (scheme and host, no path), not {url!r}."
        )
    return url


def trusted_proxies() -> tuple[str, ...]:
    """The proxies (addresses or networks) that may say who the client is in X-Forwarded-For,
    to the web server and to Django alike; none by default, so every such header is ignored."""
    return trusted_proxies_parse(env_text("AGENTPORTAL_TRUSTED_PROXIES", ""))


def portal_settings() -> PortalSettings:
    return PortalSettings(
        SITE_URL=site_url(),
        TRUSTED_PROXIES=trusted_proxies(),
        # Failed sign-ins per user name and address before that pair waits out the window.
        LOGIN_FAILURES=env_count("AGENTPORTAL_LOGIN_FAILURES", 5),
        LOGIN_LOCK_SECONDS=env_count("AGENTPORTAL_LOGIN_LOCK_SECONDS", 15 * 60),
        # Failed sign-ins per user name from any address before the name waits out its window.
        LOGIN_FAILURES_PER_NAME=env_count("AGENTPORTAL_LOGIN_FAILURES_PER_NAME", 20),
        LOGIN_NAME_LOCK_SECONDS=env_count("AGENTPORTAL_LOGIN_NAME_LOCK_SECONDS", 3600),
        # Requests per API key (per address without one), and wrong keys per address a minute.
        API_RATE=env_text("AGENTPORTAL_API_RATE", "600/minute"),
        AUTH_FAILURES_PER_MINUTE=env_count("AGENTPORTAL_AUTH_FAILURES_PER_MINUTE", 20),
        # How customers see whoever of the shop's staff decided (never their login name).
        STAFF_DISPLAY_NAME=env_text("AGENTPORTAL_STAFF_DISPLAY_NAME", "a supervisor"),
        # Turns /metrics on, for scrapers that send it as a bearer token.
        METRICS_TOKEN=env_text("AGENTPORTAL_METRICS_TOKEN", ""),
        # Webhooks to http:// and to loopback or private addresses (a local test receiver).
        WEBHOOK_ALLOW_PRIVATE=env_bool("AGENTPORTAL_WEBHOOK_ALLOW_PRIVATE"),
        # Processes of the web server (each serves many requests and event streams at once).
        WEB_PROCESSES=env_count("AGENTPORTAL_WEB_PROCESSES", 2),
        # A new shop's running-run capacity.
        DEFAULT_MAX_RUNNING_RUNS=env_count("AGENTPORTAL_MAX_RUNNING_RUNS", 8),
    )
