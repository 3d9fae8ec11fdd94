"""Escalating a call nobody decided: once, when its policy's `escalate_after_seconds` have
passed. A django-q2 schedule made with the call fires it on time; `maintain` is the backstop
for a schedule that was lost or fired early.
"""

import logging

from django.db import transaction
from django.utils import timezone
from django_q.models import Schedule

from approvals import locks
from approvals.audit.record import record_append
from approvals.models import Approval, ApprovalStatus, RecordKind
from approvals.notify import notifications
from runs import services as run_services
from runs.locks import run_lock

logger = logging.getLogger(__name__)


def approval_escalation_schedule(*, approval: Approval) -> None:
    """Schedule the call's escalation for its `escalate_at`. Call inside the transaction that
    creates the call: the schedule is a row of the same database and commits with it."""
    Schedule.objects.create(
        name=f"escalate:{approval.interrupt_id}",
        func="approvals.tasks.escalate",
        args=repr((approval.interrupt_id,)),
        schedule_type=Schedule.ONCE,
        repeats=-1,
        next_run=approval.escalate_at,
    )


def approval_escalate(*, interrupt_id: str) -> bool:
    """Escalate one call if it is still undecided and due: mark it, add `approval.escalated`
    to its run's timeline, and queue the email and the signed webhook. False when it was
    decided, escalated already or is not due yet: safe to run twice, and concurrently."""
    approval = Approval.objects.filter(interrupt_id=interrupt_id).only("run_id").first()
    if approval is None:
        return False
    now = timezone.now()
    with transaction.atomic():
        run = run_lock(approval.run_id)
        locked = locks.approval_lock(pk=approval.pk)
        if (
            locked.status != ApprovalStatus.PENDING_APPROVAL
            or locked.escalated_at is not None
            or locked.escalate_at is None
            or locked.escalate_at > now
        ):
            return False
        moved = Approval.objects.filter(
            pk=locked.pk, status=ApprovalStatus.PENDING_APPROVAL, escalated_at__isnull=True
        ).update(escalated_at=now, updated_at=now)
        if moved != 1:
            raise transaction.TransactionManagementError("approval changed under its lock")
        locked.escalated_at = now
        run_services.run_events_append_locked(
            run,
            events=[
                (
                    "approval.escalated",
                    {
                        "interrupt_id": locked.interrupt_id,
                        "waiting_since": locked.created_at.isoformat(),
                        "expires_at": locked.expires_at.isoformat(),
                    },
                )
            ],
        )
        notifications.approval_escalated_notify(approval=locked)
        waited = int((now - locked.created_at).total_seconds())
        record_append(
            approval=locked,
            kind=RecordKind.ESCALATED,
            justification=f"undecided for {waited} s",
        )
    logger.info("escalated %s after it waited since %s", interrupt_id, locked.created_at)
    return True


def approvals_escalate_due() -> int:
    """`maintain`'s sweep: every undecided call past its escalation time and not escalated."""
    due = Approval.objects.filter(
        status=ApprovalStatus.PENDING_APPROVAL,
        escalated_at__isnull=True,
        escalate_at__lte=timezone.now(),
    ).values_list("interrupt_id", flat=True)
    return sum(approval_escalate(interrupt_id=interrupt_id) for interrupt_id in list(due[:500]))
