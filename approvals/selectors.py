import hashlib
from dataclasses import dataclass
from typing import Any

from django.db.models import (
    OuterRef,
    QuerySet,
    Subquery,
)
from django.utils.text import capfirst

from agentportal.models import Membership, Role
from agentportal.principals import Principal
from agentportal.selectors import merchants_supervised_by
from approvals import customer_words
from approvals.models import (
    TICKET_OPEN_STATUSES,
    Approval,
    ApprovalPolicy,
    ApprovalPolicyVersion,
    ApprovalStatus,
    ApproverGroup,
    Order,
    Proposal,
    Refund,
    StockLevel,
    Ticket,
    TicketStatus,
)
from runs import selectors as run_selectors
from runs.models import (
    FINISHED_STATUSES,
    AgentRun,
    Conversation,
    ConversationMessage,
    ConversationStatus,
    RunStatus,
)
from runs.snapshot import CallStatus, SnapshotError, snapshot_parse


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
    return (
        Approval.objects.filter(merchant=principal.merchant)
        .select_related(
            "merchant", "decided_by", "policy_version", "assigned_user", "assigned_group"
        )
        .prefetch_related("votes__user")
    )


def approval_for(principal: Principal, interrupt_id: str) -> Approval | None:
    return approvals_visible_to(principal).filter(interrupt_id=interrupt_id).first()


def approvals_for_supervisor(*, user) -> QuerySet[Approval]:
    """The calls a signed-in supervisor may see, across the shops they supervise now."""
    return (
        Approval.objects.filter(merchant__in=merchants_supervised_by(user=user))
        .select_related(
            "merchant",
            "decided_by",
            "run__account",
            "policy_version",
            "assigned_user",
            "assigned_group",
        )
        .prefetch_related("votes__user")
    )


def policies_of(*, merchant) -> QuerySet[ApprovalPolicy]:
    """A shop's approval policies by tool name, each with its current version. A policy
    whose first version was never written has no rules yet: it is not listed."""
    return (
        ApprovalPolicy.objects.filter(merchant=merchant, current__isnull=False)
        .select_related("current")
        .order_by("tool_name")
    )


def policy_of(*, merchant, tool_name: str) -> ApprovalPolicy | None:
    """The shop's policy of one tool; another shop's is not found."""
    return policies_of(merchant=merchant).filter(tool_name=tool_name).first()


def policy_versions(policy: ApprovalPolicy) -> QuerySet[ApprovalPolicyVersion]:
    """Every version of a policy, newest first, with who wrote it."""
    return policy.versions.select_related("created_by").order_by("-version")


def approval_siblings(approval: Approval) -> list[Approval]:
    """The other calls of the model turn that paused with this one (a composite interrupt),
    in the model's order. Their tool-call keys share the turn's prefix."""
    turn = approval.tool_execution_key.rpartition(":")[0] + ":"
    siblings = Approval.objects.filter(
        run_id=approval.run_id, tool_execution_key__startswith=turn
    ).exclude(pk=approval.pk)
    return sorted(siblings, key=lambda call: int(call.tool_execution_key.rpartition(":")[2]))


def orders_named(approvals) -> dict[tuple[int, int, str], Order]:
    """The orders these calls name in their `order_id`, by (shop, customer, number): those
    of the call's own customer only, as the tools see them. One query."""
    wanted = {
        (a.merchant_id, a.run.account_id, str(a.proposed_args.get("order_id", "")).upper())
        for a in approvals
        if a.proposed_args.get("order_id")
    }
    if not wanted:
        return {}
    orders = Order.objects.filter(
        merchant_id__in={shop for shop, _, _ in wanted},
        number__in={number for _, _, number in wanted},
    )
    found = {(o.merchant_id, o.customer_id, o.number): o for o in orders}
    return {key: found[key] for key in wanted if key in found}


def order_refunds(order: Order) -> QuerySet[Refund]:
    """The refunds paid on an order: the ledger."""
    return Refund.objects.filter(order=order).order_by("created_at", "pk")


def order_refund_calls(order: Order) -> QuerySet[Approval]:
    """Every refund the agent asked for on this order, whatever became of it."""
    return Approval.objects.filter(
        merchant_id=order.merchant_id,
        run__account_id=order.customer_id,
        tool_name="issue_refund",
        proposed_args__order_id=order.number,
    ).order_by("created_at", "pk")


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


def tickets_waiting_for_supervisor(*, user) -> QuerySet[Ticket]:
    """The plans waiting for this supervisor (a review, or a new version), oldest change
    first, with their current proposal's `summary`."""
    current = Proposal.objects.filter(ticket=OuterRef("pk"), version=OuterRef("version"))
    return (
        tickets_for_supervisor(user=user)
        .filter(status__in=[TicketStatus.WAITING_REVIEW, TicketStatus.NEEDS_REVISION])
        .annotate(summary=Subquery(current.values("summary")[:1]))
        .order_by("updated_at", "pk")
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


def chat_principal(*, user) -> Principal | None:
    """A signed-in customer chatting: with the first shop where they are a customer now."""
    membership = customer_membership(user=user)
    if membership is None:
        return None
    return Principal(merchant=membership.merchant, role=Role.CUSTOMER, user=user)


def chat_conversation(*, principal: Principal) -> Conversation | None:
    """The customer's current conversation: the newest one still open."""
    return (
        run_selectors.conversations_visible_to(principal)
        .exclude(status=ConversationStatus.CLOSED)
        .order_by("-current_since", "-created_at")
        .first()
    )


# What the chat shows of each message: its state and its run's.
_CHAT_ROW = ("pk", "status", "run", "run__status", "run__version", "run__last_event_seq")


def chat_digest(*, conversation: Conversation | None) -> str:
    """What the chat shows, in a few characters: its messages' and their runs' states."""
    rows = (
        run_selectors.conversation_messages(conversation).values_list(*_CHAT_ROW)
        if conversation
        else []
    )
    return _chat_digest(conversation.pk if conversation else None, rows)


def chat_digests(*, user_ids: list[int]) -> dict[int, str]:
    """By customer: the digest of their chat as `chat_digest` makes it, for many customers in
    three statements (the live pages read every open chat once a second)."""
    return {user_id: state.digest for user_id, state in chat_states(user_ids=user_ids).items()}


@dataclass(frozen=True)
class ChatState:
    """What a customer's open chat shows (`digest`), and where the assistant may be writing an
    answer now: the run, and the message whose row shows that run's answer."""

    digest: str
    writing: tuple[str, int] | None = None


def chat_states(*, user_ids: list[int]) -> dict[int, ChatState]:
    """By customer: their chat's state, for many customers in three statements."""
    shop_of: dict[int, int] = {}
    for user_id, merchant_id in (
        Membership.objects.filter(
            user_id__in=user_ids, role=Role.CUSTOMER, active=True, merchant__active=True
        )
        .order_by("pk")
        .values_list("user", "merchant")
    ):
        shop_of.setdefault(user_id, merchant_id)
    current: dict[int, object] = {}
    for pk, customer_id, merchant_id in (
        Conversation.objects.filter(customer__in=shop_of, merchant__in=set(shop_of.values()))
        .exclude(status=ConversationStatus.CLOSED)
        .order_by("-current_since", "-created_at")
        .values_list("pk", "customer", "merchant")
    ):
        if shop_of[customer_id] == merchant_id:
            current.setdefault(customer_id, pk)
    rows: dict[object, list[tuple]] = {}
    for conversation_id, *row in (
        ConversationMessage.objects.filter(conversation__in=current.values())
        .order_by("created_at", "pk")
        .values_list("conversation", *_CHAT_ROW)
    ):
        rows.setdefault(conversation_id, []).append(tuple(row))
    states = {}
    for user_id in user_ids:
        conversation_rows = rows.get(current.get(user_id), [])
        states[user_id] = ChatState(
            _chat_digest(current.get(user_id), conversation_rows), _writing(conversation_rows)
        )
    return states


def _writing(rows: list[tuple]) -> tuple[str, int] | None:
    """The run that may be writing an answer (queued or running: one at a time in a
    conversation) and the last of its messages, whose row shows its answer."""
    for pk, _, run, run_status, *_ in reversed(rows):
        if run is not None and run_status in (RunStatus.QUEUED, RunStatus.RUNNING):
            return str(run), pk
    return None


def _chat_digest(conversation_pk, rows) -> str:
    state = [str(conversation_pk) if conversation_pk else "", *map(str, rows)]
    return hashlib.sha256("|".join(state).encode()).hexdigest()[:16]


def approver_group_members(*, merchant_id: int, group: str, user_ids) -> set[int]:
    """Which of these users are members of the shop's approver group `group` now."""
    return set(
        ApproverGroup.members.through.objects.filter(
            approvergroup__merchant_id=merchant_id, approvergroup__name=group, user_id__in=user_ids
        ).values_list("user_id", flat=True)
    )


def approval_pending(run: AgentRun) -> list[dict[str, Any]]:
    """What a run waiting for approval shows in its `pending` list: every call still
    undecided, in the model's order."""
    if run.status != RunStatus.WAITING_APPROVAL or not run.state_snapshot:
        return []
    try:
        calls = snapshot_parse(run.state_snapshot).calls
    except SnapshotError:
        return []
    return [
        {
            "interrupt_id": call.interrupt_id,
            "kind": "approval",
            "tool_name": call.tool_name,
            "tool_args": call.tool_args,
            "expires_at": call.expires_at,
        }
        for call in calls
        if call.status == CallStatus.PENDING_APPROVAL
    ]
