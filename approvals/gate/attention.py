"""When people first look at a call: the start of the time a decision takes a person, which
/metrics reports beside the time to decide (approvals.monitoring)."""

from django.utils import timezone

from agentportal.selectors import principal_for_user
from approvals.models import Approval


def approval_seen_record(*, approval: Approval, user) -> bool:
    """Record that `user` opened the call, if nobody who supervises its shop had before;
    True when this was the first look. One conditional update: of two people opening it at
    once, the first write stands."""
    if approval.first_seen_at is not None:
        return False
    principal = principal_for_user(user=user, merchant=approval.merchant)
    if principal is None or not principal.can_supervise:
        return False
    now = timezone.now()
    seen = Approval.objects.filter(pk=approval.pk, first_seen_at__isnull=True).update(
        first_seen_at=now
    )
    if seen:
        approval.first_seen_at = now
    return bool(seen)
