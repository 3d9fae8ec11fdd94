"""Tenancy: shops (merchants), who belongs to them in which role, and API keys."""

from django.conf import settings
from django.db import models


def default_max_running_runs() -> int:
    """A new shop's running-run capacity (AGENTPORTAL_MAX_RUNNING_RUNS)."""
    return settings.AGENTPORTAL["DEFAULT_MAX_RUNNING_RUNS"]


class Merchant(models.Model):
    slug = models.SlugField(unique=True)
    name = models.CharField(max_length=200)
    active = models.BooleanField(default=True)
    max_running_runs = models.PositiveIntegerField(default=default_max_running_runs)
    # Slots kept for this shop: while it runs fewer than this, it is scheduled first.
    reserved_slots = models.PositiveIntegerField(default=0)
    last_scheduled_at = models.DateTimeField(null=True, blank=True)
    webhook_url = models.URLField(blank=True)
    webhook_secret = models.CharField(max_length=128, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug


class Role(models.TextChoices):
    CUSTOMER = "customer"
    SUPERVISOR = "supervisor"
    OPERATOR = "operator"


class Membership(models.Model):
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    merchant = models.ForeignKey(Merchant, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices)
    active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "merchant"], name="membership_user_merchant")
        ]

    def __str__(self) -> str:
        return f"{self.user} @ {self.merchant} ({self.role})"

    @property
    def can_supervise(self) -> bool:
        return self.active and self.role in (Role.SUPERVISOR, Role.OPERATOR)


class ApiKeyRole(models.TextChoices):
    CUSTOMER = "customer"
    SUPERVISOR = "supervisor"
    SERVICE = "service"


class ApiKey(models.Model):
    """A bearer credential. Only the SHA-256 of the secret is kept; the prefix finds the row."""

    merchant = models.ForeignKey(Merchant, on_delete=models.CASCADE, related_name="api_keys")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="api_keys",
        help_text="The user the key acts as; empty for a service key.",
    )
    role = models.CharField(max_length=16, choices=ApiKeyRole.choices)
    prefix = models.CharField(max_length=16, unique=True)
    key_hash = models.CharField(max_length=64)
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "API key"

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.role} @ {self.merchant})"

    @property
    def is_service(self) -> bool:
        return self.role == ApiKeyRole.SERVICE
