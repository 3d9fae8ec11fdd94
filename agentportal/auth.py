"""Bearer API keys for DRF, checked against the current membership on every request."""

import hmac

from rest_framework import authentication, exceptions

from agentportal.models import ApiKey, ApiKeyRole, Role
from agentportal.principals import Principal
from agentportal.selectors import membership_current
from agentportal.services import api_key_hash, api_key_parse_prefix
from agentportal.throttles import AuthFailures


class ApiKeyAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).decode("latin-1")
        if not header:
            return None
        scheme, _, raw_key = header.partition(" ")
        try:
            if scheme.lower() != "bearer" or not raw_key.strip():
                raise exceptions.AuthenticationFailed("Use 'Authorization: Bearer <api key>'.")
            principal = principal_for_key(raw_key.strip())
        except exceptions.AuthenticationFailed:
            # Counted only when a key is wrong: a right one costs nothing more.
            AuthFailures(request).record_and_check()
            raise
        return (principal.user or principal, principal)

    def authenticate_header(self, request):
        return 'Bearer realm="api"'


def principal_for_key(raw_key: str) -> Principal:
    prefix = api_key_parse_prefix(raw_key)
    key = (
        ApiKey.objects.select_related("merchant", "user").filter(prefix=prefix).first()
        if prefix
        else None
    )
    if key is None or not hmac.compare_digest(key.key_hash, api_key_hash(raw_key)):
        raise exceptions.AuthenticationFailed("Invalid API key.")
    if key.revoked_at is not None:
        raise exceptions.AuthenticationFailed("This API key was revoked.")
    if not key.merchant.active:
        raise exceptions.AuthenticationFailed("This merchant is not active.")
    if key.role == ApiKeyRole.SERVICE:
        return Principal(merchant=key.merchant, role="service", api_key=key)
    membership = membership_current(user=key.user, merchant=key.merchant)
    if membership is None or not key.user.is_active:
        raise exceptions.PermissionDenied("Your membership of this shop was revoked.")
    # A key never grants more than it was made for, nor more than the membership holds now.
    role = Role.CUSTOMER if key.role == ApiKeyRole.CUSTOMER else membership.role
    return Principal(merchant=key.merchant, role=role, user=key.user, api_key=key)
