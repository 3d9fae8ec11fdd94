"""Every row lock the after-sales domain takes. Its rows come last in the lock order
(Merchant -> Membership -> Conversation -> AgentRun -> Approval / Ticket -> Order): lock the
run first, with runs.locks.run_lock. Call these inside a transaction; see runs.locks for what a
lock means on each database."""

from approvals.models import Approval, ApprovalPolicy, Order, RecordChain, Ticket


def approval_lock(**lookup) -> Approval:
    return Approval.objects.select_for_update(of=("self",)).get(**lookup)


def ticket_lock(ticket_id) -> Ticket:
    return Ticket.objects.select_for_update(of=("self",)).get(pk=ticket_id)


def order_lock(order_id: int) -> Order:
    return Order.objects.select_for_update(of=("self",)).get(pk=order_id)


def policy_lock(policy_id: int) -> ApprovalPolicy:
    """A shop's policy of one tool, while a new version of it is written: taken alone, in a
    transaction that locks nothing else, so it has no place in the order above."""
    return ApprovalPolicy.objects.select_for_update(of=("self",)).get(pk=policy_id)


def record_chain_lock(merchant_id: int) -> RecordChain:
    """A shop's decision-record chain, while entries are sealed onto it or archived off it:
    taken alone, like a policy's."""
    return RecordChain.objects.select_for_update(of=("self",)).get(merchant_id=merchant_id)
