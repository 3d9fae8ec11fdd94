"""Who stands in for a supervisor who is away (approvals.models.Absence): their delegate, or
the delegate's own if they are away too, as far as the chain goes among people who supervise
the shop now. Read by the gate's assignment and by the notifications."""

from dataclasses import dataclass

from django.contrib.auth.models import User
from django.utils import timezone

from agentportal.selectors import principal_for_user
from approvals.models import Absence

# How far a chain of delegates is followed (a cycle ends it sooner).
MAX_HOPS = 5


@dataclass(frozen=True)
class StandIn:
    """Who takes what comes to `away` now, and the absence that says so (None: nobody is
    away, `user` is the person asked for)."""

    user: User
    away: User | None = None
    absence: Absence | None = None

    @property
    def delegated(self) -> bool:
        return self.absence is not None

    def said(self) -> str:
        """The line an email to the stand-in starts with."""
        if self.absence is None:
            return ""
        return (
            f"You get this for {self.away.get_username()}, away until "
            f"{self.absence.ends_at:%Y-%m-%d %H:%M} UTC, who named you to stand in.\n\n"
        )


def absence_current(*, merchant, user, at=None) -> Absence | None:
    """The user's absence from the shop at `at` (now), with its delegate."""
    at = at or timezone.now()
    return (
        Absence.objects.select_related("delegate")
        .filter(merchant=merchant, user=user, starts_at__lte=at, ends_at__gt=at)
        .order_by("starts_at")
        .first()
    )


def stand_in_for(*, merchant, user, at=None) -> StandIn:
    """Who takes what comes to `user` in the shop now: themselves unless they are away and
    their delegate (followed while away too) supervises the shop now."""
    seen = {user.pk}
    current, first_absence = user, None
    for _ in range(MAX_HOPS):
        absence = absence_current(merchant=merchant, user=current, at=at)
        if absence is None or absence.delegate_id in seen:
            break
        principal = principal_for_user(user=absence.delegate, merchant=merchant)
        if principal is None or not principal.can_supervise:
            break
        first_absence = first_absence or absence
        seen.add(absence.delegate_id)
        current = absence.delegate
    if current.pk == user.pk:
        return StandIn(user=user)
    return StandIn(user=current, away=user, absence=first_absence)


def stand_ins_for(*, merchant, users: list) -> list[StandIn]:
    """stand_in_for() of each of `users`, in one query when nobody is away (the usual day)."""
    now = timezone.now()
    away = set(
        Absence.objects.filter(
            merchant=merchant, user__in=users, starts_at__lte=now, ends_at__gt=now
        ).values_list("user_id", flat=True)
    )
    return [
        stand_in_for(merchant=merchant, user=user, at=now) if user.pk in away else StandIn(user)
        for user in users
    ]
