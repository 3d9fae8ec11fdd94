"""Who is calling: the merchant, the effective role and the user behind a request."""

from dataclasses import dataclass

from django.conf import settings
from django.contrib.auth.models import User

from agentportal.models import ApiKey, Merchant, Role


@dataclass(frozen=True)
class Principal:
    merchant: Merchant
    role: str  # customer | supervisor | operator | service
    user: User | None = None
    api_key: ApiKey | None = None

    # DRF's IsAuthenticated asks the request's user; a service key has no user, so the
    # principal itself stands in for it.
    is_authenticated = True

    @property
    def is_service(self) -> bool:
        return self.role == "service"

    @property
    def is_customer(self) -> bool:
        return self.role == Role.CUSTOMER

    @property
    def is_operator(self) -> bool:
        return self.role == Role.OPERATOR

    @property
    def can_supervise(self) -> bool:
        return self.role in (Role.SUPERVISOR, Role.OPERATOR)

    @property
    def scope(self) -> str:
        """What idempotency keys are scoped to: the user in this shop, or the shop for service
        keys."""
        if self.user is not None:
            return f"user:{self.user.pk}@{self.merchant.pk}"
        return f"service:{self.merchant.pk}"

    @property
    def name(self) -> str:
        return self.user.get_username() if self.user else f"service:{self.merchant.slug}"

    @property
    def public_name(self) -> str:
        """How the shop's customers see who acted: a customer by their login name, the shop's
        staff and integrations by AGENTPORTAL_STAFF_DISPLAY_NAME, never by theirs."""
        if self.is_customer:
            return self.name
        return settings.AGENTPORTAL["STAFF_DISPLAY_NAME"]
