"""The supervisor's inbox: the calls waiting for them, those asked for together kept together,
and the plans waiting for their review, each row readable."""

from datetime import timedelta
from typing import Any

from django.utils import timezone
from django.utils.timesince import timesince

from approvals import selectors
from approvals.gate.decision_context import approvals_note, call_label, money
from approvals.gate.policies import call_amount
from approvals.gate.reviews import call_review
from approvals.models import Approval

# How many rows the inbox lists at once, of each kind.
INBOX_ROWS = 100


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


def inbox_context(*, user, sort: str | None) -> dict[str, Any]:
    """The inbox's calls and plans for a supervisor: calls sorted by `sort` ("age", oldest
    first, unless "amount", largest first), those asked for together kept together, each
    with what its row shows."""
    sort = sort if sort in selectors.INBOX_SORTS else "age"
    pending = selectors.approvals_pending_for_supervisor(user=user, amount=call_amount(), sort=sort)
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
    now = timezone.now()
    for call in calls:
        call.waited = _waited(call.created_at, now)
    for plan in plans:
        plan.waited = _waited(plan.updated_at, now)
    return {
        "pending": calls,
        "pending_count": len(calls) if len(calls) < INBOX_ROWS else pending.count(),
        "sort": sort,
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
