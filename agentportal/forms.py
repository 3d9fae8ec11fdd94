"""Sign-in forms for the portal and the admin, with guessing slowed down."""

from django import forms
from django.conf import settings
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.forms import AuthenticationForm
from django.core.cache import cache


class LoginAttempts:
    """Failed sign-ins per user name and address, in the cache every web node shares: past
    AGENTPORTAL_LOGIN_FAILURES (default 5) in AGENTPORTAL_LOGIN_LOCK_SECONDS, that pair is
    refused until the window passes, even with the right password."""

    def __init__(self, request, username: str) -> None:
        address = request.META.get("REMOTE_ADDR", "") if request is not None else ""
        self.key = f"login-failures:{username.strip().lower()}:{address}"

    @staticmethod
    def window() -> int:
        return settings.AGENTPORTAL["LOGIN_LOCK_SECONDS"]

    def locked(self) -> bool:
        return (cache.get(self.key) or 0) >= settings.AGENTPORTAL["LOGIN_FAILURES"]

    def failed(self) -> None:
        if not cache.add(self.key, 1, timeout=self.window()):
            try:
                cache.incr(self.key)
            except ValueError:  # expired between the two calls
                cache.add(self.key, 1, timeout=self.window())

    def clear(self) -> None:
        cache.delete(self.key)


class _Throttled:
    """What both sign-in forms add to Django's: the attempts are counted and capped."""

    def clean(self):
        attempts = LoginAttempts(self.request, self.data.get("username", ""))
        if attempts.locked():
            minutes = max(1, round(attempts.window() / 60))
            raise forms.ValidationError(
                f"Too many attempts; try again in {minutes} minutes.", code="throttled"
            )
        try:
            cleaned = super().clean()
        except forms.ValidationError:
            attempts.failed()
            raise
        attempts.clear()
        return cleaned


class ThrottledAuthenticationForm(_Throttled, AuthenticationForm):
    pass


class ThrottledAdminAuthenticationForm(_Throttled, AdminAuthenticationForm):
    pass
