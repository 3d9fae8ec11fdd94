"""The shop's part in reviewing a refund (the gate's CallReview for issue_refund): the order it
names and its refunds, what looks wrong with it (more than is refundable, an amount the customer
never wrote, an order that is not the customer's), and the check that a revision names only the
customer's own orders."""

import re
from collections.abc import Iterable
from decimal import Decimal, InvalidOperation
from typing import Any

from agentportal import errors
from approvals import selectors
from approvals.gate.decision_context import money, readable_arguments
from approvals.gate.reviews import CallReview, Concern
from approvals.models import Approval, ApprovalStatus, Order
from runs import selectors as run_selectors

REFUND_TOOL = "issue_refund"

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


def _amount(arguments: dict[str, Any]) -> Decimal | None:
    try:
        return Decimal(str(arguments["amount"]))
    except (KeyError, InvalidOperation, ValueError):
        return None


def numbers_written(texts: Iterable[str]) -> list[str]:
    """The numbers in these texts as they were written, each once, in order."""
    found: list[str] = []
    for text in texts:
        for number in _WRITTEN_NUMBER.findall(text):
            if number not in found:
                found.append(number)
    return found


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


def _headline(number: str, amount: Decimal | None, currency: str) -> str:
    if amount is not None:
        return f"Refund of {money(amount, currency)} on {number}"
    return f"Refund on {number}" if number else "Refund"


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


def order_number(arguments: dict[str, Any]) -> str:
    return str(arguments.get("order_id") or "").upper()


def _customers_order(approval: Approval, number: str) -> Order | None:
    """The order `number` names, when it is one of the call's customer's; else None."""
    if not number:
        return None
    return selectors.order_for_customer(
        merchant_id=approval.merchant_id, customer_id=approval.run.account_id, number=number
    )


def _customer_texts(transcript) -> list[str]:
    return [line.text for line in transcript if line.speaker == "customer"]


def refund_revision_concerns(approval: Approval, arguments: dict[str, Any]) -> list[Concern]:
    """The warnings for a revision of the refund to `arguments` (validated): its order must be
    the customer's and its amount within what is refundable."""
    number = order_number(arguments)
    order = _customers_order(approval, number)
    _, open_amounts = _earlier_refunds(order, approval) if order else ([], [])
    amount = _amount(arguments)
    return refund_concerns(
        order_number=number,
        order=order,
        amount=amount if amount is not None else Decimal("0"),
        customer_texts=_customer_texts(run_selectors.run_transcript(approval.run)),
        open_amounts=open_amounts,
    )


def refund_facts(approval: Approval, transcript) -> dict[str, Any]:
    """The call page's account of a refund: its headline and arguments in the order's currency,
    the order and its refunds, and (while it waits) the warnings on the amount an approval now
    would pay: a colleague's revision waiting for a second approval, or the model's."""
    arguments = approval.proposed_args
    number = order_number(arguments)
    order = _customers_order(approval, number)
    currency = order.currency if order else ""
    refunds, open_amounts = _earlier_refunds(order, approval) if order else ([], [])
    warnings = []
    if approval.status == ApprovalStatus.PENDING_APPROVAL:
        judged = _amount(approval.arguments_on_the_table)
        warnings = refund_warnings(
            order_number=number,
            order=order,
            amount=judged if judged is not None else Decimal("0"),
            customer_texts=_customer_texts(transcript),
            open_amounts=open_amounts,
        )
    return {
        "headline": _headline(number, _amount(arguments), currency),
        "arguments": readable_arguments(REFUND_TOOL, arguments, currency),
        "approved_arguments": readable_arguments(
            REFUND_TOOL, approval.approved_args or {}, currency
        ),
        "order_number": number,
        "order": order,
        "order_lines": _order_lines(order) if order else [],
        "order_figures": _order_figures(order) if order else [],
        "earlier_refunds": refunds,
        "warnings": warnings,
    }


def refund_revision_check(approval: Approval, revised: dict[str, Any]) -> None:
    """A revision names only the customer's own orders: the customer is told about the call,
    and must never read another customer's order number."""
    number = revised.get("order_id")
    if number is not None and not _customers_order(approval, number):
        raise errors.InvalidInput(
            f"{number} is not an order of this customer; a revision names one of theirs.",
            errors=[{"field": "tool_args.order_id", "message": "not an order of this customer"}],
        )


def refund_currencies(calls: list[Approval]) -> dict[Any, str]:
    """Each refund's currency: its order's."""
    orders = selectors.orders_named(calls)
    currencies = {}
    for call in calls:
        order = orders.get(
            (call.merchant_id, call.run.account_id, order_number(call.proposed_args))
        )
        currencies[call.pk] = order.currency if order else ""
    return currencies


REFUND_REVIEW = CallReview(
    tool_name=REFUND_TOOL,
    label="Refund",
    argument_labels={"order_id": "Order", "amount": "Amount", "reason": "Reason"},
    subject=order_number,
    currencies=refund_currencies,
    amount_field="amount",
    revision_check=refund_revision_check,
    facts=refund_facts,
    concerns=refund_revision_concerns,
)
