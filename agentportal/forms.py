"""Sign-in forms for the portal and the admin, with guessing slowed down."""

from django import forms
from django.conf import settings
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.forms import AuthenticationForm

from agentportal.counters import WindowCounter, counter_key
from agentportal.proxies import client_address


class LoginAttempts:
    """Failed sign-ins per user name and address: past AGENTPORTAL_LOGIN_FAILURES (default 5)
    in AGENTPORTAL_LOGIN_LOCK_SECONDS, that pair is refused until the window passes, even
    with the right password. Per name across addresses too, a slower limit
    (AGENTPORTAL_LOGIN_FAILURES_PER_NAME, default 20 in AGENTPORTAL_LOGIN_NAME_LOCK_SECONDS,
    an hour), so that changing address gains a guesser little."""

    def __init__(self, request, username: str) -> None:
        address = client_address(request) if request is not None else ""
        self.counter = WindowCounter(
            counter_key("login-failures", username.strip(), address), self.window()
        )
        self.name_counter = WindowCounter(
            counter_key("login-failures-name", username.strip()),
            settings.AGENTPORTAL["LOGIN_NAME_LOCK_SECONDS"],
        )

    @staticmethod
    def window() -> int:
        return settings.AGENTPORTAL["LOGIN_LOCK_SECONDS"]

    def locked_for(self) -> int:
        """The window of the limit that is reached, in seconds; 0 when none is."""
        if self.name_counter.count() >= settings.AGENTPORTAL["LOGIN_FAILURES_PER_NAME"]:
            return self.name_counter.window
        if self.counter.count() >= settings.AGENTPORTAL["LOGIN_FAILURES"]:
            return self.window()
        return 0

    def failed(self) -> None:
        self.counter.add()
        self.name_counter.add()

    def clear(self) -> None:
        # The name's count runs its window out: a guesser's failures before the owner signed
        # in still count against the name.
        self.counter.clear()


class _Throttled:
    """What both sign-in forms add to Django's: the attempts are counted and capped."""

    def clean(self):
        attempts = LoginAttempts(self.request, str(self.data.get("username", "")))
        if locked_for := attempts.locked_for():
            minutes = max(1, round(locked_for / 60))
            raise forms.ValidationError(
                f"Too many attempts; try again in {minutes} minutes.", code="throttled"
            )
        try:
            cleaned = super().clean()
        except forms.ValidationError:
            attempts.failed()
            raise
        if self.get_user() is not None:
            # Only a sign-in that succeeded clears the count (a blank password signs nobody in).
            attempts.clear()
        return cleaned


class ThrottledAuthenticationForm(_Throttled, AuthenticationForm):
    pass


class ThrottledAdminAuthenticationForm(_Throttled, AdminAuthenticationForm):
    pass
