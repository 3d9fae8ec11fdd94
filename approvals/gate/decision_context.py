"""What a supervisor needs to decide a call, in plain words: what the customer said, the
order the call is about, what looks wrong with it, who approved it already and what its
policy asks, and the other calls asked for with it."""

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal, InvalidOperation
from typing import Any

from django.utils import timezone
from django.utils.timesince import timesince

from approvals import selectors
from approvals.models import (
    Approval,
    ApprovalPolicyVersion,
    ApprovalStatus,
    ApprovalVote,
    Decision,
    Order,
)
from runs import selectors as run_selectors

TOOL_LABELS = {"issue_refund": "Refund"}
ARGUMENT_LABELS = {"order_id": "Order", "amount": "Amount", "reason": "Reason"}
# What became of a refund the agent asked for and the ledger has not paid, as a supervisor
# says it: only the ledger's refunds are listed as paid.
REFUND_OUTCOMES = {
    ApprovalStatus.PENDING_APPROVAL: "waiting for a decision",
    ApprovalStatus.APPROVED_EXECUTING: "approved, not paid yet",
    ApprovalStatus.FAILED: "refused when carried out, not paid",
    ApprovalStatus.REJECTED: "rejected",
    ApprovalStatus.EXPIRED: "expired, not paid",
    ApprovalStatus.CANCELLED: "cancelled, not paid",
}
# Refunds asked for that may still be paid.
OPEN_REFUNDS = (ApprovalStatus.PENDING_APPROVAL, ApprovalStatus.APPROVED_EXECUTING)
# A number as a customer writes one ("20", "20.50", "20,50"), not inside a word or an order
# number such as ORD-1004.
_WRITTEN_NUMBER = re.compile(r"(?<![\w.,-])(\d+(?:[.,]\d{1,2})?)(?!\w)")


def money(amount: Any, currency: str = "") -> str:
    """20 -> "20.00 EUR"; what is not a number is shown as it is."""
    try:
        value = f"{Decimal(str(amount)):.2f}"
    except (InvalidOperation, ValueError):
        return str(amount)
    return f"{value} {currency}".strip()


def _amount(arguments: dict[str, Any]) -> Decimal | None:
    try:
        return Decimal(str(arguments["amount"]))
    except (KeyError, InvalidOperation, ValueError):
        return None


def order_number(arguments: dict[str, Any]) -> str:
    return str(arguments.get("order_id") or "").upper()


def call_label(tool_name: str) -> str:
    return TOOL_LABELS.get(tool_name, tool_name.replace("_", " ").capitalize())


def readable_arguments(arguments: dict[str, Any], currency: str = "") -> list[tuple[str, str]]:
    """(label, value) for each argument: an amount with its currency, a list as JSON."""
    readable = []
    for name, value in arguments.items():
        if name == "amount":
            shown = money(value, currency)
        elif isinstance(value, dict | list):
            shown = json.dumps(value, ensure_ascii=False)
        else:
            shown = str(value)
        readable.append((ARGUMENT_LABELS.get(name, name.replace("_", " ").capitalize()), shown))
    return readable


def numbers_written(texts: Iterable[str]) -> list[str]:
    """The numbers in these texts as they were written, each once, in order."""
    found: list[str] = []
    for text in texts:
        for number in _WRITTEN_NUMBER.findall(text):
            if number not in found:
                found.append(number)
    return found


@dataclass(frozen=True)
class Concern:
    """A warning before approving: `blocking` when approved as it is the call cannot do what
    it says (more than is refundable, an order that is not the customer's)."""

    text: str
    blocking: bool = False


def refund_warnings(**kwargs) -> list[str]:
    """refund_concerns' words."""
    return [concern.text for concern in refund_concerns(**kwargs)]


def refund_concerns(
    *,
    order_number: str,
    order: Order | None,
    amount: Decimal,
    customer_texts: Iterable[str],
    open_amounts: Iterable[Decimal] = (),
) -> list[Concern]:
    """What a supervisor should know before approving a refund of `amount` on `order` (None:
    the customer has no order `order_number`), in plain words; empty when nothing looks off.
    `open_amounts`: the order's other refunds waiting or approved, not paid yet."""
    if order is None:
        return [
            Concern(
                f"{order_number or 'The order'} is not an order of this customer in this shop: "
                "the refund cannot be paid.",
                blocking=True,
            )
        ]
    concerns = []
    currency = order.currency
    still_open = sum(open_amounts, Decimal("0"))
    if amount > order.refundable:
        concerns.append(
            Concern(
                f"The refund of {money(amount, currency)} is more than the "
                f"{money(order.refundable, currency)} still refundable on {order.number} "
                f"(total {money(order.total, currency)}, {money(order.refunded, currency)} "
                "refunded already). Approved as it is, it will fail.",
                blocking=True,
            )
        )
    elif amount + still_open > order.refundable:
        concerns.append(
            Concern(
                f"Other refunds of {money(still_open, currency)} on {order.number} are waiting "
                f"or approved: with this one they come to more than the "
                f"{money(order.refundable, currency)} still refundable."
            )
        )
    written = numbers_written(customer_texts)
    if amount not in {Decimal(number.replace(",", ".")) for number in written}:
        if written:
            concerns.append(
                Concern(
                    f"The customer never wrote {money(amount)} in their messages "
                    f"(the numbers they wrote: {', '.join(written[:6])})."
                )
            )
        else:
            concerns.append(
                Concern(
                    "The customer named no amount in their messages: "
                    f"{money(amount, currency)} is the agent's choice."
                )
            )
    return concerns


def _customers_order(approval: Approval, number: str):
    """The order `number` names, when it is one of the call's customer's; else None."""
    if not number:
        return None
    return selectors.order_for_customer(
        merchant_id=approval.merchant_id, customer_id=approval.run.account_id, number=number
    )


def revision_concerns(approval: Approval, arguments: dict[str, Any]) -> list[Concern]:
    """The warnings of the call's page, for a revision of it to `arguments` (validated): its
    order must be the customer's and its amount within what is refundable."""
    if approval.tool_name != "issue_refund":
        return []
    number = order_number(arguments)
    order = _customers_order(approval, number)
    _, open_amounts = _earlier_refunds(order, approval) if order else ([], [])
    amount = _amount(arguments)
    return refund_concerns(
        order_number=number,
        order=order,
        amount=amount if amount is not None else Decimal("0"),
        customer_texts=[
            line.text
            for line in run_selectors.run_transcript(approval.run)
            if line.speaker == "customer"
        ],
        open_amounts=open_amounts,
    )


def approval_decision_context(approval: Approval) -> dict[str, Any]:
    """The approval page's account of the call: headline, readable arguments, what the
    customer said, the order and its refunds, and (while it waits) the warnings."""
    arguments = approval.proposed_args
    number = order_number(arguments)
    order = _customers_order(approval, number)
    currency = order.currency if order else ""
    transcript = run_selectors.run_transcript(approval.run)
    refunds, open_amounts = _earlier_refunds(order, approval) if order else ([], [])
    amount = _amount(arguments)
    warnings = []
    if approval.status == ApprovalStatus.PENDING_APPROVAL and approval.tool_name == "issue_refund":
        # The amount an approval now would pay: a colleague's revision waiting for a second
        # approval, or the model's.
        judged = _amount(approval.arguments_on_the_table)
        warnings = refund_warnings(
            order_number=number,
            order=order,
            amount=judged if judged is not None else Decimal("0"),
            customer_texts=[line.text for line in transcript if line.speaker == "customer"],
            open_amounts=open_amounts,
        )
    return {
        "headline": _headline(approval.tool_name, number, amount, currency),
        "arguments": readable_arguments(arguments, currency),
        "approved_arguments": readable_arguments(approval.approved_args or {}, currency),
        "transcript": transcript,
        "order_number": number,
        "order": order,
        "order_lines": _order_lines(order) if order else [],
        "order_figures": _order_figures(order) if order else [],
        "earlier_refunds": refunds,
        "warnings": warnings,
    }


def _headline(tool_name: str, number: str, amount: Decimal | None, currency: str) -> str:
    if tool_name == "issue_refund" and amount is not None:
        return f"Refund of {money(amount, currency)} on {number}"
    return f"{call_label(tool_name)} on {number}" if number else call_label(tool_name)


def _order_lines(order: Order) -> list[dict[str, Any]]:
    return [
        {
            "name": item.get("name") or item.get("sku", ""),
            "sku": item.get("sku", ""),
            "size": item.get("size", ""),
            "quantity": item.get("quantity", 1),
            "unit_price": money(item.get("unit_price", ""), order.currency),
        }
        for item in order.items
    ]


def _order_figures(order: Order) -> list[tuple[str, str]]:
    return [
        ("Total", money(order.total, order.currency)),
        ("Already refunded", money(order.refunded, order.currency)),
        ("Still refundable", money(order.refundable, order.currency)),
    ]


def _earlier_refunds(order: Order, approval: Approval) -> tuple[list[dict], list[Decimal]]:
    """The order's other refunds, paid or asked for, oldest first; and the amounts of those
    that may still be paid."""
    paid = [
        refund
        for refund in selectors.order_refunds(order)
        if refund.idempotency_key != approval.tool_execution_key
    ]
    rows = [
        {"amount": money(r.amount, order.currency), "at": r.created_at, "status": "paid"}
        for r in paid
    ]
    paid_keys = {refund.idempotency_key for refund in paid}
    open_amounts = []
    for call in selectors.order_refund_calls(order).exclude(pk=approval.pk):
        if call.tool_execution_key in paid_keys:
            continue  # listed as paid, from the ledger
        amount = _amount(call.executed_args or call.approved_args or call.proposed_args)
        if call.status in OPEN_REFUNDS and amount is not None:
            open_amounts.append(amount)
        rows.append(
            {
                "amount": money(amount, order.currency),
                "at": call.created_at,
                "status": REFUND_OUTCOMES.get(call.status, "not paid"),
            }
        )
    rows.sort(key=lambda row: row["at"])
    return rows, open_amounts


# --- who approved, and what the call still needs -------------------------------------------------


def policy_described(version: ApprovalPolicyVersion) -> str:
    """A policy version's rules as a supervisor reads them: "two approvers from 200.00
    (version 1)"."""
    rules = []
    if version.auto_approve_up_to is not None:
        rules.append(f"approved by the rule up to {money(version.auto_approve_up_to)}")
    if version.two_approvers_from is not None:
        rules.append(f"two approvers from {money(version.two_approvers_from)}")
    if version.escalate_after_seconds:
        rules.append(f"escalated after {_duration(version.escalate_after_seconds)} undecided")
    return f"{', '.join(rules) or 'one approver'} (version {version.version})"


def _duration(seconds: int) -> str:
    if seconds < 60:
        return f"{seconds} second{'s' if seconds != 1 else ''}"
    now = timezone.now()
    return timesince(now - timedelta(seconds=seconds), now)


def approvals_context(approval: Approval, *, user) -> dict[str, Any]:
    """The approval page's account of the approvals: who approved the arguments on the table
    and when, whether this supervisor may approve (not twice: a call that needs two people
    needs two different ones), whose changes an approval now approves, and the policy."""
    pending = approval.status == ApprovalStatus.PENDING_APPROVAL
    votes = approval.current_votes
    approved_by_me = pending and any(vote.user_id == user.pk for vote in votes)
    revised = pending and approval.approved_args not in (None, approval.proposed_args)
    revisers = [vote.voter_name for vote in votes if vote.decision == Decision.REVISE]
    return {
        "four_eyes": approval.required_approvals > 1,
        "approvals_given": [_given(vote) for vote in votes],
        "approved_by_me": approved_by_me,
        "can_approve": pending and not approved_by_me,
        "revised_by": revisers[0] if revised and revisers else "",
        "approve_label": (
            f"Approve {revisers[0]}'s changes" if revised and revisers else "Approve as proposed"
        ),
        "on_the_table": approval.arguments_on_the_table,
        "policy": policy_described(approval.policy_version) if approval.policy_version else "",
    }


def _given(vote: ApprovalVote) -> dict[str, Any]:
    return {
        "by": vote.voter_name,
        "at": vote.created_at,
        "revised": vote.decision == Decision.REVISE,
    }


def approvals_note(approval: Approval, *, user_id: int) -> tuple[str, bool]:
    """An inbox row's word on a call that needs two approvals ("needs 2 approvals", "1 of 2
    approvals: sam"; "you" for the supervisor reading it), and whether they gave one: then
    it waits for another supervisor. Nothing for a call one approval decides."""
    if approval.required_approvals <= 1:
        return "", False
    votes = approval.current_votes
    required = approval.required_approvals
    if not votes:
        return f"needs {required} approvals", False
    names = ", ".join(
        ("you" if vote.user_id == user_id else vote.voter_name)
        + (" (with changes)" if vote.decision == Decision.REVISE else "")
        for vote in votes
    )
    mine = any(vote.user_id == user_id for vote in votes)
    return f"{len(votes)} of {required} approvals: {names}", mine


# What a call's status means, for a supervisor looking at the calls of one request.
CALL_STATES = {
    ApprovalStatus.PENDING_APPROVAL: "waiting for a decision",
    ApprovalStatus.APPROVED_EXECUTING: "approved, about to be carried out",
    ApprovalStatus.EXECUTED: "carried out",
    ApprovalStatus.FAILED: "refused when carried out: nothing was done",
    ApprovalStatus.REJECTED: "rejected",
    ApprovalStatus.EXPIRED: "expired: nobody decided in time",
    ApprovalStatus.CANCELLED: "cancelled with the request",
}


def siblings_context(approval: Approval) -> list[dict[str, Any]]:
    """The other calls the model asked for in the same turn, each with its state: they were
    paused together and are decided one by one."""
    return [
        {
            "interrupt_id": sibling.interrupt_id,
            "label": call_label(sibling.tool_name),
            "arguments": ", ".join(
                f"{label}: {value}" for label, value in readable_arguments(sibling.proposed_args)
            ),
            "state": CALL_STATES.get(sibling.status, sibling.status),
            "pending": sibling.status == ApprovalStatus.PENDING_APPROVAL,
        }
        for sibling in selectors.approval_siblings(approval)
    ]
