"""Setting and ending a supervisor's absence from a shop (approvals.models.Absence), which
sends what would come to them to a colleague meanwhile (approvals.stand_ins)."""

from django.db import transaction
from django.utils import timezone

from agentportal import errors
from agentportal.selectors import principal_for_user
from approvals.models import Absence
from runs.locks import membership_lock


def _field_error(field: str, message: str) -> errors.InvalidInput:
    return errors.InvalidInput(message, errors=[{"field": field, "message": message}])


def absence_set(*, merchant, user, delegate, starts_at, ends_at) -> Absence:
    """`user` is away from the shop from `starts_at` until `ends_at`, `delegate` standing in.
    Both must supervise the shop now; an absence may not overlap another of theirs (checked
    holding the user's membership lock, so two at once cannot both pass)."""
    principal = principal_for_user(user=user, merchant=merchant)
    if principal is None or not principal.can_supervise:
        raise errors.NotAllowed("Only the shop's supervisors are away from it.")
    if ends_at <= timezone.now():
        raise _field_error("ends_at", "That absence is over already.")
    if ends_at <= starts_at:
        raise _field_error("ends_at", "The absence must end after it starts.")
    if delegate is None or delegate.pk == user.pk:
        raise _field_error("delegate", "Name a colleague to stand in for you.")
    stands_in = principal_for_user(user=delegate, merchant=merchant)
    if stands_in is None or not stands_in.can_supervise:
        raise _field_error("delegate", f"{delegate.get_username()} does not supervise this shop.")
    with transaction.atomic():
        membership_lock(merchant=merchant, account=user)
        overlapping = Absence.objects.filter(
            merchant=merchant, user=user, starts_at__lt=ends_at, ends_at__gt=starts_at
        ).first()
        if overlapping is not None:
            raise _field_error(
                "starts_at",
                f"You are away then already (until {overlapping.ends_at:%Y-%m-%d %H:%M} UTC): "
                "end that absence first.",
            )
        return Absence.objects.create(
            merchant=merchant, user=user, delegate=delegate, starts_at=starts_at, ends_at=ends_at
        )


def absence_end(*, absence: Absence) -> None:
    """End an absence now: one not started yet is dropped, one over already stays as it was.
    Safe to call twice."""
    now = timezone.now()
    with transaction.atomic():
        membership_lock(merchant=absence.merchant, account=absence.user)
        Absence.objects.filter(pk=absence.pk, starts_at__gte=now).delete()
        Absence.objects.filter(pk=absence.pk, starts_at__lt=now, ends_at__gt=now).update(
            ends_at=now
        )
