"""The supervisor's inbox: the calls waiting for them, those asked for together kept together,
and the plans waiting for their review, each row readable."""

from datetime import timedelta
from typing import Any

from django.db.models import Case, Count, DateTimeField, Expression, F, Q, When
from django.utils import timezone
from django.utils.timesince import timesince

from approvals import selectors
from approvals.gate.decision_context import approvals_note, call_label, money
from approvals.gate.policies import call_amount
from approvals.gate.reviews import call_review
from approvals.models import Approval, ApprovalStatus

# How many rows the inbox lists at once, of each kind.
INBOX_ROWS = 100
# The inbox's views, in the order of its tabs.
VIEW_NAMES = {
    "all": "All",
    "mine": "Assigned to me",
    "groups": "My groups",
    "unassigned": "Unassigned",
}


# Escalated calls come first in either order: their policy says they waited too long.
ESCALATED_FIRST = F("escalated_at").asc(nulls_last=True)
INBOX_SORTS = {
    # Oldest first: the call waiting longest is the customer waiting longest.
    "age": (ESCALATED_FIRST, "created_at", "pk"),
    "amount": (ESCALATED_FIRST, F("amount").desc(nulls_last=True), "created_at", "pk"),
}


# A call that expires this soon is at risk: the inbox lists it first, the soonest first.
AT_RISK_WITHIN = timedelta(minutes=10)


def inbox_views(user) -> dict[str, Q]:
    """The inbox's views of the calls waiting: all, those assigned to the supervisor, to a
    group of theirs, or to nobody."""
    return {
        "all": Q(),
        "mine": Q(assigned_user=user),
        "groups": Q(assigned_group__members=user),
        "unassigned": Q(assigned_user__isnull=True, assigned_group__isnull=True),
    }


def approvals_pending_for_supervisor(
    *, user, amount: Expression, sort: str = "age", view: str = "all"
):
    """The calls of `view` (one of inbox_views) waiting for this supervisor's decision, with
    `amount` (an expression of a call's amount as a number, None for a call without one)
    annotated to sort by: `sort` is one of INBOX_SORTS, after the calls at risk of expiring
    (`at_risk_until`, their expiry; None for the others)."""
    at_risk = When(expires_at__lte=timezone.now() + AT_RISK_WITHIN, then=F("expires_at"))
    return (
        selectors.approvals_for_supervisor(user=user)
        .filter(inbox_views(user)[view], status=ApprovalStatus.PENDING_APPROVAL)
        .annotate(amount=amount, at_risk_until=Case(at_risk, output_field=DateTimeField()))
        .order_by(F("at_risk_until").asc(nulls_last=True), *INBOX_SORTS[sort])
    )


def inbox_view_counts(*, user) -> dict[str, int]:
    """How many calls wait in each of the inbox's views, in one query."""
    pending = selectors.approvals_for_supervisor(user=user).filter(
        status=ApprovalStatus.PENDING_APPROVAL
    )
    return pending.aggregate(
        **{
            name: Count("pk", filter=condition or None, distinct=True)
            for name, condition in inbox_views(user).items()
        }
    )


def _grouped_by_request(calls: list[Approval]) -> list[Approval]:
    """The calls with those of one request (run) together, where its first call sorted; each
    knows its place in its group (`group_position` of `group_size`)."""
    groups: dict[Any, list[Approval]] = {}
    for call in calls:
        groups.setdefault(call.run_id, []).append(call)
    ordered = []
    for group in groups.values():
        group.sort(key=lambda call: call.tool_execution_key)
        for position, call in enumerate(group, start=1):
            call.group_position, call.group_size = position, len(group)
        ordered += group
    return ordered


def inbox_context(*, user, sort: str | None, view: str | None = None) -> dict[str, Any]:
    """The inbox's calls and plans for a supervisor: calls of `view` (all unless "mine",
    "groups" or "unassigned") sorted by `sort` ("age", oldest first, unless "amount", largest
    first), those asked for together kept together, each with what its row shows."""
    sort = sort if sort in INBOX_SORTS else "age"
    view = view if view in VIEW_NAMES else "all"
    pending = approvals_pending_for_supervisor(
        user=user, amount=call_amount(), sort=sort, view=view
    )
    calls = _grouped_by_request(list(pending[:INBOX_ROWS]))
    currencies = _currencies(calls)
    for call in calls:
        review = call_review(call.tool_name)
        call.label = call_label(call.tool_name)
        call.approvals_note, call.approved_by_me = approvals_note(call, user_id=user.pk)
        call.subject = review.subject(call.proposed_args) if review.subject else ""
        call.amount_shown = (
            money(call.amount, currencies.get(call.pk, "")) if call.amount is not None else ""
        )
    plans = list(selectors.tickets_waiting_for_supervisor(user=user)[:INBOX_ROWS])
    counts = inbox_view_counts(user=user)
    now = timezone.now()
    for call in calls:
        call.waited = _waited(call.created_at, now)
    for plan in plans:
        plan.waited = _waited(plan.updated_at, now)
    return {
        "pending": calls,
        "pending_count": len(calls) if len(calls) < INBOX_ROWS else pending.count(),
        "sort": sort,
        "view": view,
        "views": [(name, label, counts[name]) for name, label in VIEW_NAMES.items()],
        "plans": plans,
        "now": now,
    }


def _currencies(calls: list[Approval]) -> dict[Any, str]:
    """Each call's currency, as its tool's review says: a query per tool at most."""
    by_tool: dict[str, list[Approval]] = {}
    for call in calls:
        by_tool.setdefault(call.tool_name, []).append(call)
    currencies: dict[Any, str] = {}
    for tool_name, of_tool in by_tool.items():
        currencies_of = call_review(tool_name).currencies
        if currencies_of is not None:
            currencies |= currencies_of(of_tool)
    return currencies


def _waited(since, now) -> str:
    """How long something has waited, as a person says it: "just now", "12 minutes ago"."""
    if now - since < timedelta(minutes=1):
        return "just now"
    return f"{timesince(since, now)} ago"
