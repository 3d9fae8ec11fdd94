"""Writes for tenancy and access."""

import hashlib
import secrets

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from agentportal.models import ApiKey, ApiKeyRole, Membership, Merchant

KEY_PREFIX_BYTES = 6


def api_key_hash(raw_key: str) -> str:
    return hashlib.sha256(raw_key.encode()).hexdigest()


def api_key_parse_prefix(raw_key: str) -> str | None:
    # The secret part is URL-safe base64 and may itself contain underscores.
    parts = raw_key.split("_", 2)
    if len(parts) != 3 or parts[0] != "ap" or not parts[1] or not parts[2]:
        return None
    return parts[1]


def api_key_create(
    *, merchant: Merchant, role: str, user: User | None = None
) -> tuple[ApiKey, str]:
    """Create a key and return it with its secret, which is shown once and never stored."""
    if role not in ApiKeyRole.values:
        raise ValueError(f"unknown role {role!r}")
    if (role == ApiKeyRole.SERVICE) != (user is None):
        raise ValueError("a service key has no user; customer and supervisor keys need one")
    if user is not None:
        membership = Membership.objects.filter(user=user, merchant=merchant, active=True).first()
        if membership is None:
            raise ValueError(f"{user.username} is not an active member of {merchant.slug}")
        if role == ApiKeyRole.SUPERVISOR and not membership.can_supervise:
            raise ValueError(f"{user.username} is not a supervisor of {merchant.slug}")
    prefix = secrets.token_hex(KEY_PREFIX_BYTES)
    raw_key = f"ap_{prefix}_{secrets.token_urlsafe(32)}"
    key = ApiKey.objects.create(
        merchant=merchant, user=user, role=role, prefix=prefix, key_hash=api_key_hash(raw_key)
    )
    return key, raw_key


def api_key_revoke(*, api_key: ApiKey) -> None:
    ApiKey.objects.filter(pk=api_key.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())


def membership_revoke(*, membership: Membership) -> bool:
    """Revoke a membership; every later request checks it, so access ends at once."""
    with transaction.atomic():
        return bool(
            Membership.objects.filter(pk=membership.pk, active=True).update(
                active=False, revoked_at=timezone.now()
            )
        )
