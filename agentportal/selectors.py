from django.contrib.auth.models import User

from agentportal.models import Membership, Merchant, Role
from agentportal.principals import Principal


def membership_current(*, user: User, merchant: Merchant) -> Membership | None:
    """The user's active membership in the merchant, read now (never cached on a key)."""
    return Membership.objects.filter(user=user, merchant=merchant, active=True).first()


def customer_membership_by_username(*, merchant: Merchant, username: str) -> Membership | None:
    return (
        Membership.objects.select_related("user")
        .filter(merchant=merchant, user__username=username, role=Role.CUSTOMER, active=True)
        .first()
    )


def supervisor_memberships(*, merchant: Merchant):
    return Membership.objects.select_related("user").filter(
        merchant=merchant, active=True, role__in=[Role.SUPERVISOR, Role.OPERATOR]
    )


def _merchants_where(*, user: User, roles: list[str]):
    """Shops where the user holds one of `roles` now; every shop for a superuser, the
    platform's own staff (an operator is a role in a shop, never a key to the others)."""
    if user.is_superuser:
        return Merchant.objects.all()
    return Merchant.objects.filter(
        pk__in=Membership.objects.filter(user=user, active=True, role__in=roles).values("merchant")
    )


def merchants_supervised_by(*, user: User):
    """Shops whose runs, approvals and plans a staff user may see and decide."""
    return _merchants_where(user=user, roles=[Role.SUPERVISOR, Role.OPERATOR])


def merchants_operated_by(*, user: User):
    """Shops whose parked runs a user may hand back or fail: where they are an operator."""
    return _merchants_where(user=user, roles=[Role.OPERATOR])


def principal_for_user(*, user: User, merchant: Merchant):
    """A signed-in user acting in a shop, by their current membership; superusers act as
    operators. None when they have no standing there."""
    membership = membership_current(user=user, merchant=merchant)
    if membership is not None and user.is_active:
        return Principal(merchant=merchant, role=membership.role, user=user)
    if user.is_active and user.is_superuser:
        return Principal(merchant=merchant, role=Role.OPERATOR, user=user)
    return None
