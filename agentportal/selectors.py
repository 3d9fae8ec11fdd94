from django.contrib.auth.models import User

from agentportal.models import Membership, Merchant, Role


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


def user_is_operator(*, user: User) -> bool:
    """Superusers and operators: they see every shop and repair what workers could not."""
    return (
        user.is_superuser
        or Membership.objects.filter(user=user, active=True, role=Role.OPERATOR).exists()
    )


def merchants_supervised_by(*, user: User):
    """Merchants a staff user may see in the admin; operators and superusers see all."""
    if user_is_operator(user=user):
        return Merchant.objects.all()
    return Merchant.objects.filter(
        memberships__user=user, memberships__active=True, memberships__role=Role.SUPERVISOR
    )


def principal_for_user(*, user: User, merchant: Merchant):
    """A signed-in user acting in a shop, by their current membership; superusers act as
    operators. None when they have no standing there."""
    from agentportal.principals import Principal

    membership = membership_current(user=user, merchant=merchant)
    if membership is not None and user.is_active:
        return Principal(merchant=merchant, role=membership.role, user=user)
    if user.is_active and user.is_superuser:
        return Principal(merchant=merchant, role=Role.OPERATOR, user=user)
    return None
