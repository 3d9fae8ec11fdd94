"""django-q2 entry points of the approvals app. Each is safe to run twice."""

from approvals import plans
from approvals.gate import escalation
from approvals.notify import outbox


def deliver() -> int:
    return outbox.deliveries_deliver_due()


def reconcile(run_id: str) -> int:
    return plans.plan_reconcile(run_id=run_id)


def escalate(interrupt_id: str) -> bool:
    return escalation.approval_escalate(interrupt_id=interrupt_id)
