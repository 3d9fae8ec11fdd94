"""The after-sales tools the agent may call. Each checks what it names against the run's
customer and shop: an order of another customer does not exist for this run."""

import re
import time
from datetime import timedelta
from decimal import Decimal
from typing import Annotated, Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from approvals import locks, selectors
from approvals.gate.policies import APPROVAL_POLICY
from approvals.models import FollowupRequest, Order, OrderStatus, Refund
from approvals.plans import PLAN_POLICY
from approvals.plans.exchange_items import ExchangeItems, exchange_line_problem, sized_sku
from runs.tools import Policy, Tool, ToolCancelled, ToolContext, ToolError, tool_register

ORDER_NUMBER = r"^ORD-\d{1,12}$"
# An amount of money as people write it in a form or a model in JSON: ASCII digits, an
# optional dot and at most two decimals (the shop's currencies have two). Nothing else: no
# sign, exponent, underscore, blank or other script's digits.
PLAIN_AMOUNT = re.compile(r"[0-9]{1,8}(\.[0-9]{1,2})?")
CENT = Decimal("0.01")


def plain_amount(value: Any) -> Decimal:
    """The amount `value` spells, to the cent ("5" is 5.00); ValueError unless it is plainly
    written. A JSON number counts as written the way JSON spells it."""
    if isinstance(value, bool) or not isinstance(value, str | int | float | Decimal):
        raise ValueError("an amount like 49.90")
    text = (
        value if isinstance(value, str) else repr(value) if isinstance(value, float) else str(value)
    )
    if not PLAIN_AMOUNT.fullmatch(text):
        raise ValueError("an amount like 49.90: digits, then at most two decimals after a dot")
    return Decimal(text).quantize(CENT)


Amount = Annotated[
    Decimal,
    BeforeValidator(plain_amount),
    Field(gt=0, max_digits=10, decimal_places=2, description="e.g. 49.90"),
]


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)


class LookupOrderArgs(_Args):
    order_id: str = Field(pattern=ORDER_NUMBER, description="The order number, like ORD-1001.")


class ListOrdersArgs(_Args):
    status: OrderStatus | None = Field(default=None, description="Only orders in this status.")


class ExchangeEligibilityArgs(_Args):
    order_id: str = Field(pattern=ORDER_NUMBER)
    sku: str = Field(min_length=1, max_length=64, description="The SKU bought.")
    new_size: str = Field(min_length=1, max_length=8, description="The size wanted instead.")


class CheckStockArgs(_Args):
    sku: str = Field(min_length=1, max_length=64)
    size: str = Field(default="", max_length=8, description="A size; empty: the SKU's own.")


class ClarificationArgs(_Args):
    question: str = Field(min_length=1, max_length=500, description="What to ask the customer.")


class ExchangeProposalArgs(_Args):
    order_id: str = Field(pattern=ORDER_NUMBER)
    items: ExchangeItems


class FollowupArgs(_Args):
    order_id: str = Field(pattern=ORDER_NUMBER)
    note: str = Field(default="", max_length=500, description="What to follow up on.")


class IssueRefundArgs(_Args):
    order_id: str = Field(pattern=ORDER_NUMBER)
    amount: Amount
    reason: str = Field(min_length=1, max_length=500)


def _order(context: ToolContext, number: str) -> Order:
    order = selectors.order_for_customer(
        merchant_id=context.merchant_id, customer_id=context.account_id, number=number
    )
    if order is None:
        raise ToolError(f"there is no order {number} for this customer")
    return order


def order_summary(order: Order) -> dict[str, Any]:
    return {
        "order_id": order.number,
        "status": order.status,
        "items": order.items,
        "total": str(order.total),
        "currency": order.currency,
        "refunded": str(order.refunded),
        "refundable": str(order.refundable),
        "placed_at": order.placed_at.isoformat(),
        "delivered_at": order.delivered_at.isoformat() if order.delivered_at else None,
    }


def lookup_order(args: LookupOrderArgs, context: ToolContext) -> dict[str, Any]:
    return order_summary(_order(context, args.order_id))


def list_orders(args: ListOrdersArgs, context: ToolContext) -> dict[str, Any]:
    orders = selectors.orders_for_customer(
        merchant_id=context.merchant_id, customer_id=context.account_id
    )
    if args.status:
        orders = orders.filter(status=args.status)
    return {
        "orders": [
            {
                "order_id": o.number,
                "status": o.status,
                "total": str(o.total),
                "currency": o.currency,
            }
            for o in orders
        ]
    }


def check_exchange_eligibility(args: ExchangeEligibilityArgs, context: ToolContext) -> dict:
    order = _order(context, args.order_id)
    item = next((item for item in order.items if item["sku"] == args.sku), None)
    quantity = item.get("quantity", 1) if item else 1
    new_sku = sized_sku(args.sku, args.new_size)
    problem = exchange_line_problem(order, sku=args.sku, quantity=quantity, new_sku=new_sku)
    if problem:
        return {"eligible": False, "reason": problem}
    in_stock = selectors.stock_level(merchant_id=context.merchant_id, sku=new_sku)
    return {"eligible": True, "new_sku": new_sku, "in_stock": in_stock}


def check_stock(args: CheckStockArgs, context: ToolContext) -> dict[str, Any]:
    """The warehouse is slow: this takes AGENTPORTAL_STOCK_LATENCY_SECONDS, and stops early
    when the run is cancelled."""
    deadline = time.monotonic() + settings.AGENTPORTAL["STOCK_LATENCY_SECONDS"]
    while (left := deadline - time.monotonic()) > 0:
        if not context.cancel.sleep(min(left, 0.05)):
            raise ToolCancelled("stock check abandoned: the run was cancelled")
    sku = sized_sku(args.sku, args.size)
    return {
        "sku": sku,
        "size": args.size or sku.rpartition("-")[2],
        "in_stock": selectors.stock_level(merchant_id=context.merchant_id, sku=sku),
    }


def issue_refund(args: IssueRefundArgs, context: ToolContext) -> dict[str, Any]:
    """Pay money back: one ledger row per call key, never more than is left refundable.

    Idempotent by the key: a second execution returns the first one's refund.
    """
    with transaction.atomic():
        refund = (
            Refund.objects.select_related("order")
            .filter(idempotency_key=context.idempotency_key)
            .first()
        )
        if refund is None:
            order = _order(context, args.order_id)
            order = locks.order_lock(order.pk)
            if args.amount > order.refundable:
                raise ToolError(
                    f"only {order.refundable} {order.currency} of {order.number} is left to "
                    f"refund, not {args.amount} {order.currency}"
                )
            # The new total computed here, in decimals: SQLite would add in floating point and
            # the next refund's conditional UPDATE would no longer match the stored total.
            paid = Order.objects.filter(pk=order.pk, refunded=order.refunded).update(
                refunded=order.refunded + args.amount
            )
            if paid != 1:
                raise ToolError("the order changed meanwhile; try again")
            refund = Refund.objects.create(
                merchant_id=order.merchant_id,
                order=order,
                amount=args.amount,
                reason=args.reason,
                idempotency_key=context.idempotency_key,
            )
    return {
        "status": "executed",
        "refund_id": refund.pk,
        "order_id": refund.order.number,
        "amount": str(refund.amount),
        "currency": refund.order.currency,
    }


def create_followup_request(args: FollowupArgs, context: ToolContext) -> dict[str, Any]:
    """Register that a colleague comes back to the customer; idempotent by the call's key."""
    order = _order(context, args.order_id)
    due_at = timezone.now() + timedelta(seconds=settings.AGENTPORTAL["FOLLOWUP_DUE_SECONDS"])
    followup, _ = FollowupRequest.objects.get_or_create(
        idempotency_key=context.idempotency_key,
        defaults={
            "merchant_id": context.merchant_id,
            "run_id": context.run_id,
            "order": order,
            "note": args.note,
            "due_at": due_at,
        },
    )
    return {
        "status": "registered",
        "followup_id": followup.pk,
        "order_id": order.number,
        "due_at": followup.due_at.isoformat(),
    }


def register() -> None:
    for tool in (
        Tool(
            name="lookup_order",
            description="Look up one of the customer's orders by its number.",
            args_model=LookupOrderArgs,
            policy=Policy.AUTO,
            executor=lookup_order,
            progress="Looking up your order…",
        ),
        Tool(
            name="list_orders",
            description="List the customer's orders.",
            args_model=ListOrdersArgs,
            policy=Policy.AUTO,
            executor=list_orders,
            progress="Looking at your orders…",
        ),
        Tool(
            name="check_exchange_eligibility",
            description="Check whether an item of an order can be exchanged for another size.",
            args_model=ExchangeEligibilityArgs,
            policy=Policy.AUTO,
            executor=check_exchange_eligibility,
            progress="Checking whether it can be exchanged…",
        ),
        Tool(
            name="issue_refund",
            description="Refund an amount of an order to the customer. A supervisor approves.",
            args_model=IssueRefundArgs,
            policy=APPROVAL_POLICY,
            executor=issue_refund,
            progress="Issuing the refund…",
        ),
        Tool(
            name="request_clarification",
            description="Ask the customer a question and wait for the answer.",
            args_model=ClarificationArgs,
            policy=Policy.CLARIFICATION,
        ),
        Tool(
            name="create_exchange_proposal",
            description=(
                "Propose an exchange plan for an order. The customer confirms it and a "
                "supervisor approves it before anything is exchanged."
            ),
            args_model=ExchangeProposalArgs,
            policy=PLAN_POLICY,
            progress="Preparing an exchange plan…",
        ),
        Tool(
            name="create_followup_request",
            description="Ask a colleague to follow up with the customer about an order. "
            "Call it alone, with no other tool in the same turn.",
            args_model=FollowupArgs,
            policy=Policy.FOLLOWUP,
            executor=create_followup_request,
            progress="Asking a colleague to follow up…",
        ),
        Tool(
            name="check_stock",
            description="Ask the warehouse how many of an SKU (in a size) are in stock. Slow.",
            args_model=CheckStockArgs,
            policy=Policy.AUTO,
            executor=check_stock,
            blocking=True,
            progress="Checking warehouse stock…",
        ),
    ):
        tool_register(tool)
