"""Sign-in forms for the portal and the admin, with guessing slowed down."""

import math

from django import forms
from django.conf import settings
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.forms import AuthenticationForm

from agentportal.counters import WindowCounter, counter_key
from agentportal.proxies import client_address


class LoginAttempts:
    """Sign-ins per user name and address, and per user name across addresses: each one with
    a password takes an attempt of both *before* its password is checked, so that sign-ins
    arriving together cannot all be checked. Past AGENTPORTAL_LOGIN_FAILURES (default 5) in
    AGENTPORTAL_LOGIN_LOCK_SECONDS for the pair, or the slower
    AGENTPORTAL_LOGIN_FAILURES_PER_NAME (default 20) in AGENTPORTAL_LOGIN_NAME_LOCK_SECONDS (an
    hour) for the name, so that changing address gains a guesser little, the sign-in is
    refused unchecked until the window passes, even with the right password. A sign-in that
    succeeds gives its attempts back."""

    def __init__(self, request, username: str) -> None:
        address = client_address(request) if request is not None else ""
        self.counter = WindowCounter(
            counter_key("login-attempts", username.strip(), address),
            settings.AGENTPORTAL["LOGIN_LOCK_SECONDS"],
        )
        self.name_counter = WindowCounter(
            counter_key("login-attempts-name", username.strip()),
            settings.AGENTPORTAL["LOGIN_NAME_LOCK_SECONDS"],
        )

    def reserve(self) -> float | None:
        """None when this attempt may check its password; else the seconds left to wait."""
        for counter, limit in (
            (self.counter, settings.AGENTPORTAL["LOGIN_FAILURES"]),
            (self.name_counter, settings.AGENTPORTAL["LOGIN_FAILURES_PER_NAME"]),
        ):
            count = counter.add()
            if count.number > limit:
                return count.seconds_left
        return None

    def clear(self) -> None:
        self.counter.clear()
        self.name_counter.clear()


class _Throttled:
    """What both sign-in forms add to Django's: the attempts are counted and capped."""

    def clean(self):
        username, password = self.cleaned_data.get("username"), self.cleaned_data.get("password")
        # Only an attempt whose password will be checked takes one (a blank one is a form error).
        if username is not None and password:
            attempts = LoginAttempts(self.request, username)
            wait = attempts.reserve()
            if wait is not None:
                minutes = max(1, math.ceil(wait / 60))
                raise forms.ValidationError(
                    f"Too many attempts; try again in {minutes} minutes.", code="throttled"
                )
        cleaned = super().clean()
        if self.get_user() is not None:
            attempts.clear()
        return cleaned


class ThrottledAuthenticationForm(_Throttled, AuthenticationForm):
    pass


class ThrottledAdminAuthenticationForm(_Throttled, AdminAuthenticationForm):
    pass
