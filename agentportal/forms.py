"""Sign-in forms for the portal and the admin, with guessing slowed down."""

import math

from django import forms
from django.conf import settings
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.forms import AuthenticationForm

from agentportal.counters import WindowCounter, client_address, counter_key


class LoginAttempts:
    """Sign-ins per user name and address: each one with a password takes one of
    AGENTPORTAL_LOGIN_FAILURES (default 5) attempts of AGENTPORTAL_LOGIN_LOCK_SECONDS *before*
    its password is checked, so that sign-ins arriving together cannot all be checked; past
    them that pair is refused unchecked until the window passes, even with the right
    password. A sign-in that succeeds gives the attempts back."""

    def __init__(self, request, username: str) -> None:
        address = client_address(request) if request is not None else ""
        self.counter = WindowCounter(
            counter_key("login-attempts", username.strip(), address),
            settings.AGENTPORTAL["LOGIN_LOCK_SECONDS"],
        )

    def reserve(self) -> float | None:
        """None when this attempt may check its password; else the seconds left to wait."""
        count = self.counter.add()
        if count.number <= settings.AGENTPORTAL["LOGIN_FAILURES"]:
            return None
        return count.seconds_left

    def clear(self) -> None:
        self.counter.clear()


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
