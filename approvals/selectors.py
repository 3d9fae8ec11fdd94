from django.db.models import OuterRef, QuerySet, Subquery
from django.utils.text import capfirst

from agentportal.models import Membership, Role
from agentportal.principals import Principal
from agentportal.selectors import merchants_supervised_by
from approvals import customer_words
from approvals.models import (
    TICKET_OPEN_STATUSES,
    Approval,
    ApprovalStatus,
    Order,
    StockLevel,
    Ticket,
    TicketStatus,
)
from runs.models import FINISHED_STATUSES, AgentRun, ConversationMessage


def order_for_customer(*, merchant_id: int, customer_id: int, number: str) -> Order | None:
    """An order of this customer in this shop; another customer's order is not found."""
    return Order.objects.filter(
        merchant_id=merchant_id, customer_id=customer_id, number=number.upper()
    ).first()


def orders_for_customer(*, merchant_id: int, customer_id: int):
    return Order.objects.filter(merchant_id=merchant_id, customer_id=customer_id)


def stock_level(*, merchant_id: int, sku: str) -> int:
    level = StockLevel.objects.filter(merchant_id=merchant_id, sku=sku).first()
    return level.quantity if level else 0


def approvals_visible_to(principal: Principal) -> QuerySet[Approval]:
    """A merchant's approvals, with what their representation needs in the same query."""
    return Approval.objects.filter(merchant=principal.merchant).select_related(
        "merchant", "decided_by"
    )


def approval_for(principal: Principal, interrupt_id: str) -> Approval | None:
    return approvals_visible_to(principal).filter(interrupt_id=interrupt_id).first()


def approvals_for_supervisor(*, user) -> QuerySet[Approval]:
    """The calls a signed-in supervisor may see, across the shops they supervise now."""
    return Approval.objects.filter(merchant__in=merchants_supervised_by(user=user)).select_related(
        "merchant", "decided_by", "run__account"
    )


def tickets_visible_to(principal: Principal) -> QuerySet[Ticket]:
    """A customer sees their own plans; supervisors and service keys their shop's. With what
    the representation needs, in a constant number of queries for a page."""
    tickets = Ticket.objects.filter(merchant=principal.merchant)
    if principal.is_customer:
        tickets = tickets.filter(customer=principal.user)
    return tickets.select_related("order").prefetch_related(
        "proposals", "confirmations__customer", "reviews__reviewer"
    )


def ticket_for(principal: Principal, ticket_id) -> Ticket | None:
    return tickets_visible_to(principal).filter(pk=ticket_id).first()


def tickets_for_supervisor(*, user) -> QuerySet[Ticket]:
    """The plans a signed-in supervisor may see, across the shops they supervise now."""
    return Ticket.objects.filter(merchant__in=merchants_supervised_by(user=user)).select_related(
        "merchant", "order", "customer"
    )


def ticket_for_user(*, user, ticket_id) -> Ticket | None:
    """A plan for its customer (while a member of its shop) or its shop's supervisors."""
    supervised = tickets_for_supervisor(user=user).filter(pk=ticket_id).first()
    if supervised is not None:
        return supervised
    return (
        Ticket.objects.select_related("merchant", "order", "customer")
        .filter(
            pk=ticket_id,
            customer=user,
            merchant__active=True,
            merchant__memberships__user=user,
            merchant__memberships__active=True,
        )
        .first()
    )


def customer_membership(*, user) -> Membership | None:
    """Where the user is a customer now (the first such shop): where their chat is."""
    return (
        Membership.objects.select_related("merchant")
        .filter(user=user, role=Role.CUSTOMER, active=True, merchant__active=True)
        .order_by("pk")
        .first()
    )


def runs_of_customer(*, user) -> QuerySet[AgentRun]:
    """The customer's requests, newest first, each with the message that started it
    (`asked`); only in shops where they are a member now (a revoked member reads nothing
    more)."""
    first_message = ConversationMessage.objects.filter(run=OuterRef("pk")).order_by(
        "created_at", "pk"
    )
    return (
        AgentRun.objects.filter(
            account=user,
            merchant__active=True,
            merchant__memberships__user=user,
            merchant__memberships__active=True,
        )
        .annotate(asked=Subquery(first_message.values("text")[:1]))
        .order_by("-created_at")
    )


def waits_of_conversation(*, conversation) -> list[str]:
    """What the conversation's unfinished runs wait for from people, in the customer's words
    ("Your refund of 20.00 EUR for ORD-1003 is waiting for a person at Demo Shop."): what
    starting over would cancel."""
    shop = conversation.merchant.name
    open_runs = conversation.runs.exclude(status__in=FINISHED_STATUSES).values("pk")
    pending = list(
        Approval.objects.filter(run__in=open_runs, status=ApprovalStatus.PENDING_APPROVAL).order_by(
            "created_at"
        )
    )
    currencies = customer_words.currencies_of(pending)
    waits = [
        capfirst(
            customer_words.call_described(
                approval, customer_words.currency_of(approval, currencies)
            )
        )
        + f" is waiting for a person at {shop}."
        for approval in pending
    ]
    for ticket in (
        Ticket.objects.filter(run__in=open_runs, status__in=TICKET_OPEN_STATUSES)
        .select_related("order")
        .order_by("created_at")
    ):
        who = (
            "for you to confirm"
            if ticket.status == TicketStatus.WAITING_CONFIRMATION
            else f"for a person at {shop}"
        )
        waits.append(f"Your exchange plan for {ticket.order.number} is waiting {who}.")
    return waits
