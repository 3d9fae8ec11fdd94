"""Every row lock the after-sales domain takes. Its rows come last in the lock order
(Merchant -> Membership -> Conversation -> AgentRun -> Approval / Ticket -> Order): lock the
run first, with runs.locks.run_lock. Call these inside a transaction; see runs.locks for what a
lock means on each database."""

from approvals.models import Approval, Order, Ticket


def approval_lock(**lookup) -> Approval:
    return Approval.objects.select_for_update(of=("self",)).get(**lookup)


def ticket_lock(ticket_id) -> Ticket:
    return Ticket.objects.select_for_update(of=("self",)).get(pk=ticket_id)


def order_lock(order_id: int) -> Order:
    return Order.objects.select_for_update(of=("self",)).get(pk=order_id)
